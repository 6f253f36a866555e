"""The Sleeper workflow definitions, one file per operation, installed as the package that
pyproject.toml's ``package-dir`` names. This file names no workflow, and says nothing the
DAG processor's safe mode looks for, so it is not parsed every cycle (a parse is a process)."""
