"""Run inside every server's OpenSandbox sandbox, beside the server: the server's peers, the head
server and loopback policy endpoints answer at the ``127.0.0.1:port`` its config names, as under
the local backend, each connection spliced to the daemon (``host:port`` of a relay or forward).

Standalone (stdlib only; started as ``python -I -S -c <this file's text> <JSON>`` with the
server's own interpreter): ``<JSON>`` is ``[[listen_port, host, port], ...]``. It prints
``forwarding N port(s)`` once every listener is bound, and exits 1 naming a port it cannot bind.
"""

import asyncio
import json
import sys


async def _pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def _handler(host, port):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


async def main(routes):
    servers = []
    for listen, host, port in routes:
        try:
            servers.append(await asyncio.start_server(_handler(host, port), "127.0.0.1", listen))
        except OSError as e:
            print(f"forwarder: cannot listen on 127.0.0.1:{listen}: {e}", flush=True)
            sys.exit(1)
    print(f"forwarding {len(servers)} port(s)", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
