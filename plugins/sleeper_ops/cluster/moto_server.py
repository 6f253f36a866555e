"""``python -m sleeper_ops.cluster.moto_server``: S3 and DynamoDB on one moto server, for
``sleeper cluster``.

Serves one request at a time: moto's ``TransactWriteItems`` is not safe under
concurrent requests (it backs up every table a transaction names and restores the
backup when the transaction is cancelled, wiping what other requests wrote meanwhile),
so a threaded server would lose commits that DynamoDB keeps when committers race.
Creates the bucket given, then prints ``moto server at http://HOST:PORT`` (the line
``sleeper cluster`` waits for) and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import urllib.request
from typing import Optional, Sequence


def serve(host: str, port: int, bucket: Optional[str]) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(host, port, app, threaded=False, request_handler=MotoRequestHandler)
    url = f"http://{host}:{server.port}"

    def shutdown(signum: int, _: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shutdown)
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()
    if bucket:  # moto does not check signatures: a plain PUT creates the bucket
        with urllib.request.urlopen(urllib.request.Request(f"{url}/{bucket}", method="PUT"), timeout=30):
            pass
    print(f"moto server at {url} (S3 and DynamoDB; bucket {bucket or '-'})", flush=True)
    thread.join()
    server.server_close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bucket", default=None, help="a bucket to create once serving")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.bucket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
