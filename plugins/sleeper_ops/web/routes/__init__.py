"""The REST API's routes (:mod:`sleeper_ops.web.rest`), one router per resource.

* :mod:`~sleeper_ops.web.routes.tables`: the catalog and a table's partitions, files and jobs;
* :mod:`~sleeper_ops.web.routes.metrics`: every readable table's figures (Prometheus);
* :mod:`~sleeper_ops.web.routes.ingest`: ingest requests (files queued for the batcher);
* :mod:`~sleeper_ops.web.routes.records`: records written, read and deleted.

What they share (the Sleeper served, the table filter, the allowed ingest prefixes) is
the app's :class:`~sleeper_ops.web.routes.context.RestContext`, a FastAPI dependency.
"""
