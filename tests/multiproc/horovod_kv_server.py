#!/usr/bin/env python3
"""A stand-in for the HTTP key-value server that horovodrun --gloo starts for its ranks.

It speaks the same protocol as horovodrun's (horovod/runner/http/http_server.py): PUT
/<scope>/<key> stores the request body, GET /<scope>/<key> returns it or 404 while it is
not set, and a path that is not exactly two parts is a 400. It binds every interface on a
free port, as horovodrun's does, writes that port to the file named by its first argument
once it is listening, logs every request line ("PUT /braid/store.n2.i0 200") to the file
named by its second argument, and serves until it is killed.
"""

import http.server
import os
import socketserver
import sys
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    # Horovod's server gives up on a request after 3 s; so does this one.
    timeout = 3

    def _parts(self):
        parts = self.path.split('/')
        if len(parts) != 3 or parts[0] != '':
            self._reply(400)
            return None
        return parts[1], parts[2]

    def _reply(self, code, body=b''):
        self.send_response(code)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)
        self.server.log(f'{self.command} {self.path} {code}')

    def do_GET(self):
        parts = self._parts()
        if parts is None:
            return
        with self.server.lock:
            value = self.server.kv.get(parts)
        if value is None:
            self._reply(404)
        else:
            self._reply(200, value)

    def do_PUT(self):
        parts = self._parts()
        if parts is None:
            return
        length = int(self.headers.get('Content-Length', '0'))
        value = self.rfile.read(length)
        with self.server.lock:
            self.server.kv[parts] = value
        self._reply(200)

    def log_message(self, fmt, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, log_path):
        super().__init__(('', 0), Handler)
        self.kv = {}
        self.lock = threading.Lock()
        self.log_lock = threading.Lock()
        self.log_file = open(log_path, 'a', buffering=1)

    def log(self, line):
        with self.log_lock:
            self.log_file.write(line + '\n')


def main():
    port_path, log_path = sys.argv[1], sys.argv[2]
    server = Server(log_path)
    tmp = port_path + '.tmp'
    with open(tmp, 'w') as f:
        f.write(f'{server.server_address[1]}\n')
    os.rename(tmp, port_path)  # whole, so a reader never sees half a number
    server.serve_forever()


if __name__ == '__main__':
    main()
