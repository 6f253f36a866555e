"""HTTP faces: the REST app and the table status page (FastAPI)."""
