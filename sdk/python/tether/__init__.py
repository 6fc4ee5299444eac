"""A client and worker for the tether job broker (https://github.com/tetherhq/tether).

The standard library is all it needs; ``websockets`` adds the WebSocket transport, and PyNaCl
or ``cryptography`` signed results::

    from tether import Client, Worker

    client = Client("http://127.0.0.1:8080")
    job = client.submit("default", "hello", {"name": "world"})

    worker = Worker("http://127.0.0.1:8080", queues=["default"])

    @worker.handler("hello")
    def hello(ctx):
        ctx.progress({"step": 1})
        return {"greeting": "hello " + ctx.payload["name"]}

    worker.run()
"""

from .client import Client
from .errors import Cancelled, Failure, Release, TetherError
from .signing import Signer, SigningUnavailable, canonical_json, output_hash
from .worker import JobContext, Worker

__all__ = ["Client", "Worker", "JobContext", "TetherError", "Cancelled", "Failure", "Release", "Signer",
           "SigningUnavailable", "canonical_json", "output_hash"]
__version__ = "0.1.0"
