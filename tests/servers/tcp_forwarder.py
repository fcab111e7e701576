"""A TCP forwarder on 127.0.0.1 in front of a server, that can be cut and restored.

An outage of a store as a client sees it: close() refuses new connections and cuts the
open ones (reset, mid-transfer if need be); open() listens again on the same port.

    with TcpForwarder("127.0.0.1", 7480) as fwd:
        url = fwd.url          # give this to the client
        fwd.close()            # the outage begins
        fwd.open()             # and ends
"""
import socket
import struct
import threading

from .procs import LOOPBACK, free_port


class TcpForwarder:
    def __init__(self, target_host, target_port, port=None):
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._lock = threading.Lock()
        self._listener = None
        self._conns = set()  # guarded by _lock: every socket of open connections
        self.accepted = 0

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    def open(self):
        """Listens (again) on the port; returns self."""
        with self._lock:
            if self._listener is not None:
                return self
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, self.port))
            listener.listen(128)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def close(self):
        """Refuses new connections and resets the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for s in conns:
            _reset(s)

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            # As radosgw's tcp_nodelay: a reply's last small segment sent at once, not held
            # for the peer's delayed ACK (~40 ms per request on a kept-alive connection).
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._listener is not listener:  # closed meanwhile
                    _reset(client)
                    _reset(upstream)
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            pending = [2]  # pumps of this connection still running
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, client, upstream, pending),
                                 daemon=True).start()

    def _pump(self, source, sink, client, upstream, pending):
        """Copies source to sink until EOF (then half-closes sink) or an error; the last
        of a connection's two pumps closes both sockets."""
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self._lock:
            pending[0] -= 1
            last = pending[0] == 0
            if last:
                self._conns.discard(client)
                self._conns.discard(upstream)
        if last:
            client.close()
            upstream.close()


def _reset(sock):
    """Cuts a connection with a reset, as a crashed server or a cut link leaves a client;
    the shutdown first wakes a thread blocked on the socket."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
