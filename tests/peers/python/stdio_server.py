"""The Python `mcp` SDK peer of server.py, served over stdio (newline-delimited JSON-RPC on
stdin/stdout) for Berth's stdio tests. Same tools: echo, add, fail, slow."""

from server import server

if __name__ == "__main__":
    server.run("stdio")
