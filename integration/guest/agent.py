#!/usr/bin/python3
"""Command agent inside a testbed host.

One TCP connection per command, reached only through QEMU's host-forward
on the machine's loopback. The client sends one JSON line
{"argv": [...], "env": {...}, "cwd": "...", "stdin": bool}, then (if stdin)
frames of type 0 (an empty one is EOF). The agent streams frames back:
type 1 stdout, 2 stderr, 3 exit status (ASCII decimal). A frame is
1 byte type + 4 bytes big-endian length + payload. When the client goes
away, the command's whole process group is killed, so an interrupted test
leaves nothing running in the guest.
"""
import argparse
import json
import os
import signal
import socket
import socketserver
import struct
import subprocess
import threading

STDIN, STDOUT, STDERR, EXIT = 0, 1, 2, 3
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class Session(socketserver.BaseRequestHandler):
    def setup(self):
        self.lock = threading.Lock()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, kind, data):
        with self.lock:
            try:
                self.request.sendall(struct.pack(">BI", kind, len(data)) + data)
            except OSError:
                pass  # client gone; the reader thread kills the command

    def pump(self, pipe, kind):
        for chunk in iter(lambda: pipe.read1(65536), b""):
            self.send(kind, chunk)

    def read_header(self):
        line = b""
        while not line.endswith(b"\n"):
            c = self.request.recv(1)
            if not c or len(line) > 1 << 20:
                return None
            line += c
        return json.loads(line)

    def handle(self):
        try:
            req = self.read_header()
            argv = req["argv"]
        except (ValueError, KeyError, TypeError, OSError):
            return
        if req is None:
            return
        env = dict(BASE_ENV, **req.get("env", {}))
        want_stdin = bool(req.get("stdin"))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if want_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=req.get("cwd") or "/",
                start_new_session=True,
            )
        except OSError as e:
            self.send(STDERR, f"agent: cannot run {argv[0]!r}: {e}\n".encode())
            self.send(EXIT, b"127")
            return
        pumps = [
            threading.Thread(target=self.pump, args=(proc.stdout, STDOUT), daemon=True),
            threading.Thread(target=self.pump, args=(proc.stderr, STDERR), daemon=True),
        ]
        for t in pumps:
            t.start()
        threading.Thread(target=self.watch_client, args=(proc, want_stdin), daemon=True).start()
        rc = proc.wait()
        for t in pumps:
            t.join()
        self.send(EXIT, str(128 - rc if rc < 0 else rc).encode())

    def watch_client(self, proc, want_stdin):
        """Forward stdin frames; kill the command if the client disconnects."""
        stdin_open = want_stdin
        while True:
            try:
                hdr = recv_exact(self.request, 5)
            except OSError:
                hdr = None
            if hdr is None:
                break
            kind, length = struct.unpack(">BI", hdr)
            data = recv_exact(self.request, length) if length else b""
            if data is None:
                break
            if kind == STDIN and stdin_open:
                try:
                    if data:
                        proc.stdin.write(data)
                        proc.stdin.flush()
                    else:
                        proc.stdin.close()
                        stdin_open = False
                except OSError:
                    stdin_open = False
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    with Server((args.listen, args.port), Session) as srv:
        srv.serve_forever()


if __name__ == "__main__":
    main()
