"""nginx on 127.0.0.1 as the HTTP side of the tests and benchmarks.

NginxOrigin serves a folder as a plain static web server would (ETag, Last-Modified, byte
ranges, sendfile): the HTTP source reads blobs from it.

FaultProxy stands in front of any HTTP server (the origin, or radosgw's S3 endpoint) and
makes it behave like a far-away cloud store: a delay on every request, a rate limit on every
connection, and on demand the next N requests answered with an error (S3's 503 SlowDown)
without reaching the upstream. It is a pure pass-through otherwise: the Host header, every
other header, the request URI and the body go upstream unchanged, so SigV4 signatures made
for the proxy's address stay valid. Its state lives in a Lua shared dict, read by every
worker on every request and changed through a control server on a second loopback port
that the proxied clients never see.

Each server is one nginx master (foreground, own process group, stopped by pid) with its
own prefix folder holding the config, the logs and nginx's temp folders; the access log
records each request's time (`access_log`) for benchmarks and debugging.

    with NginxOrigin(folder) as origin, FaultProxy(origin.url, delay_ms=20) as proxy:
        proxy.set(fail_next=2)          # the next two requests get 503 SlowDown
"""
import atexit
import functools
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from .procs import LOOPBACK, Daemon, ServerError, free_port, wait_for

NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx")
MODULE_DIRS = ("/usr/lib/nginx/modules", "/usr/share/nginx/modules")
LUA_MODULES = ("ndk_http_module.so", "ngx_http_lua_module.so")  # load order matters
INSTALL_HINT = "apt install nginx-extras"

# S3-style error bodies for injected failures; other statuses get a generic code.
S3_ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
}

ACCESS_LOG_FORMAT = ('$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                     'range="$http_range" cookie="$http_cookie" rt=$request_time '
                     'urt=$upstream_response_time '
                     'cache=$upstream_cache_status')
ACCESS_LOG_LINE = re.compile(r'^\S+ \[[^]]*\] "(?P<request>[^"]*)" (?P<status>\d+) (?P<bytes>\d+) '
                             r'.*cache=(?P<cache>\S*)$')
PEER_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                           "gpufs-peer-config")


SECRET_COOKIE = "gpufs_peer_secret"  # how gpufsd sends the job's secret (source/remote/address/peers.h)
# The account the workers of a peer's own nginx run as: gpufs-peer-config --main's default
# --user, which the package's postinst makes.
PEER_USER = "_gpufs-peer"


def peer_account():
    """Why gpufs-peer-config --main cannot run here with its default --user, or None once
    its account exists. As root, makes it if missing, as the package's postinst does; it
    stays (Debian leaves system accounts in place)."""
    try:
        pwd.getpwnam(PEER_USER)
        return None
    except KeyError:
        pass
    if os.geteuid() != 0:
        return f"no account {PEER_USER} (the gpufs package makes it; the tests do as root)"
    r = subprocess.run(["adduser", "--system", "--group", "--quiet", "--no-create-home",
                        "--home", "/nonexistent", PEER_USER], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot make the account {PEER_USER}: {r.stderr.strip()}"
    return None


def write_job_secret(path):
    """Writes a fresh job secret to `path` (mode 0600, created anew), as the Slurm prolog
    makes one; returns the path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


@functools.cache
def default_job_secret():
    """The secret file every NginxPeer of this process shares unless given another: the
    peers of one test are one job's."""
    folder = tempfile.mkdtemp(prefix="gpufs-job-secret-")
    atexit.register(shutil.rmtree, folder, True)
    return write_job_secret(os.path.join(folder, "secret"))


def secret_headers(secret_file):
    """The header that carries the job's secret in `secret_file` to a peer."""
    with open(secret_file) as f:
        return {"Cookie": f"{SECRET_COOKIE}={f.read().strip()}"}


def nginx_binary():
    """The nginx program's path, or None."""
    for c in NGINX_CANDIDATES:
        path = shutil.which(c)
        if path:
            return path
    return None


def lua_modules():
    """Paths of the NDK and Lua dynamic modules (in load order), or None."""
    for d in MODULE_DIRS:
        paths = [os.path.join(d, m) for m in LUA_MODULES]
        if all(os.path.exists(p) for p in paths):
            return paths
    return None


def s3_error_body(status):
    code, message = S3_ERRORS.get(status, (f"Injected{status}", "Injected failure."))
    return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"


def _q(path):
    """A path as an nginx config string."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _main_conf(prefix, modules, workers, http_body):
    """A complete nginx.conf: everything (pid, logs, temp folders) inside `prefix`."""
    loads = "".join(f"load_module {_q(m)};\n" for m in modules)
    # As root, nginx's workers would drop to `nobody`, who cannot read the temp folders
    # tests serve from (mkdtemp makes them 0700); these servers listen on loopback only.
    user = "user root;\n" if os.geteuid() == 0 else ""
    temps = "".join(f"  {kind}_temp_path {_q(os.path.join(prefix, 'tmp', kind))};\n"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""{loads}{user}daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile 16384;
pid {_q(os.path.join(prefix, 'nginx.pid'))};
error_log {_q(os.path.join(prefix, 'logs', 'error.log'))} warn;
events {{ worker_connections 4096; }}
http {{
  default_type application/octet-stream;
  log_format timed '{ACCESS_LOG_FORMAT}';
  access_log {_q(os.path.join(prefix, 'logs', 'access.log'))} timed;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65;
  keepalive_requests 100000;
  server_tokens off;
{temps}{http_body}}}
"""


@functools.cache
def _config_error(modules):
    """Why nginx cannot load a config with `modules` (nginx -t), or None when it can."""
    binary = nginx_binary()
    if binary is None:
        return f"nginx not installed ({INSTALL_HINT})"
    with tempfile.TemporaryDirectory(prefix="gpufs-nginx-check-") as prefix:
        for d in ("logs", "tmp"):
            os.mkdir(os.path.join(prefix, d))
        conf = os.path.join(prefix, "nginx.conf")
        with open(conf, "w") as f:
            f.write(_main_conf(prefix, modules, 1, ""))
        r = subprocess.run([binary, "-t", "-q", "-p", prefix, "-c", conf, "-e",
                            os.path.join(prefix, "logs", "error.log")],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            return f"nginx cannot load its config: {(r.stdout + r.stderr).strip()}"
    return None


class _Nginx:
    """One nginx master serving `_http_body()`; start/stop keep the ports."""

    name = "nginx"

    def __init__(self, port=None, workers=2, timeout=30):
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.workers, self.timeout = workers, timeout
        self.prefix = None
        self.daemon = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def access_log(self):
        return os.path.join(self.prefix, "logs", "access.log")

    def served(self, path_part=""):
        """(requests, body bytes) of the access log's lines whose request has `path_part`,
        and of those the count per cache status ("HIT", "MISS", "-" when not cached)."""
        requests, sent, statuses = 0, 0, {}
        if self.prefix is None or not os.path.exists(self.access_log):
            return requests, sent, statuses
        with open(self.access_log) as f:
            for line in f:
                m = ACCESS_LOG_LINE.match(line.rstrip("\n"))
                if m and path_part in m["request"]:
                    requests += 1
                    sent += int(m["bytes"])
                    statuses[m["cache"]] = statuses.get(m["cache"], 0) + 1
        return requests, sent, statuses

    def start(self):
        """Starts nginx (a fresh config each time); returns when it answers HTTP."""
        if self.daemon and self.daemon.running():
            return self
        reason = self.skip_reason()
        if reason:
            raise ServerError(reason)
        if self.prefix is None:
            # Also at exit: an interrupt can skip the caller's cleanup. close() is idempotent.
            atexit.register(self.close)
            self.prefix = tempfile.mkdtemp(prefix=f"gpufs-{self.name}-")
            for d in ("logs", "tmp"):
                os.mkdir(os.path.join(self.prefix, d))
        conf = os.path.join(self.prefix, "nginx.conf")
        with open(conf, "w") as f:
            f.write(_main_conf(self.prefix, self._modules(), self.workers, self._http_body()))
        error_log = os.path.join(self.prefix, "logs", "error.log")
        self.daemon = Daemon(self.name, [nginx_binary(), "-p", self.prefix, "-c", conf,
                                         "-e", error_log],
                             os.path.join(self.prefix, "logs", "nginx.out"),
                             logs=[error_log], own_group=True).start()
        wait_for(f"{self.name} to answer on {self._ready_url()}", self._answers,
                 time.monotonic() + self.timeout, [self.daemon])
        return self

    def stop(self):
        """Stops nginx by pid; connections to its ports are then refused."""
        if self.daemon:
            self.daemon.stop()

    def close(self):
        """Stops nginx and removes its prefix folder."""
        self.stop()
        if self.prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)
            self.prefix = None

    @classmethod
    def skip_reason(cls):
        """Why this server cannot run here (no nginx), or None when it can."""
        return _config_error(())

    def _modules(self):
        """The dynamic modules its config loads."""
        return ()

    def _ready_url(self):
        return self.url + "/"

    def _answers(self):
        """True once nginx answers HTTP at all: an error status is an answer too."""
        try:
            with urllib.request.urlopen(self._ready_url(), timeout=2):
                return True
        except urllib.error.HTTPError:
            return True


class NginxOrigin(_Nginx):
    """nginx serving the folder `root` read-only at `url` (http://127.0.0.1:PORT).

    Static files come with ETag ("mtime-size", so it changes when a file's size or
    modification second does), Last-Modified and byte ranges; no directory listings."""

    name = "nginx-origin"

    def __init__(self, root, port=None, workers=2, timeout=30):
        super().__init__(port, workers, timeout)
        self.root = os.path.abspath(root)

    def _http_body(self):
        return f"""  server {{
    listen {LOOPBACK}:{self.port};
    root {_q(self.root)};
    autoindex off;
    etag on;
    location / {{ limit_except GET HEAD {{ deny all; }} }}
  }}
"""


class NginxTls(_Nginx):
    """nginx speaking HTTPS at `url` (https://127.0.0.1:PORT) with the certificate
    `cert` and its key `key`, in front of `upstream` ("http://HOST:PORT", e.g. radosgw)
    or serving the folder `root`. The Host header goes upstream unchanged, so a SigV4
    signature made for this server's address stays valid."""

    name = "nginx-tls"

    def __init__(self, cert, key, upstream=None, root=None, port=None, workers=2, timeout=30):
        super().__init__(port, workers, timeout)
        self.url = f"https://{LOOPBACK}:{self.port}"
        self.cert, self.key, self.upstream = cert, key, upstream
        self.root = os.path.abspath(root) if root else None

    def _http_body(self):
        if self.upstream:
            serve = f"""location / {{
      proxy_pass {self.upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_request_buffering off;
      proxy_buffering off;
      client_max_body_size 0;
    }}"""
        else:
            serve = f"""root {_q(self.root)};
    autoindex off;
    etag on;
    location / {{ limit_except GET HEAD {{ deny all; }} }}"""
        return f"""  server {{
    listen {LOOPBACK}:{self.port} ssl;
    ssl_certificate {_q(self.cert)};
    ssl_certificate_key {_q(self.key)};
    {serve}
  }}
"""

    def _answers(self):
        """True once nginx answers HTTPS at all (its certificate is not checked here)."""
        import ssl
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(self._ready_url(), timeout=2, context=context):
                return True
        except urllib.error.HTTPError:
            return True


def make_private_ca(folder):
    """A private CA and a certificate it signed for 127.0.0.1 (subjectAltName IP), made
    with openssl in `folder`: {"ca": CA certificate, "cert": server certificate, "key":
    its key} paths. Raises ServerError without openssl."""
    def run(*argv):
        r = subprocess.run(["openssl", *argv], capture_output=True, text=True, cwd=folder,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise ServerError(f"openssl {' '.join(argv)} failed: {r.stderr}")

    if shutil.which("openssl") is None:
        raise ServerError("openssl not installed (apt install openssl)")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=gpufs test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", f"/CN={LOOPBACK}")
    with open(os.path.join(folder, "san.ext"), "w") as f:
        f.write(f"subjectAltName = IP:{LOOPBACK}\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return {"ca": os.path.join(folder, "ca.pem"), "cert": os.path.join(folder, "server.pem"),
            "key": os.path.join(folder, "server.key")}


class NginxPeer(_Nginx):
    """The peer cache gpufs ships (deploy/nginx/gpufs-peer.conf, filled in by
    deploy/gpufs-peer-config) at `url`, in front of `origin` ("http://HOST:PORT", an S3
    endpoint or a web server). Its cache folder lives in the prefix: stop()/start() keep
    the cached slices, close() removes them. It answers only requests with the job's
    secret, `secret_file` (gpufsd --peer-secret-file; default_job_secret() unless given),
    which `headers` sends."""

    name = "nginx-peer"

    def __init__(self, origin, slice_bytes=4 << 20, cache_size="2g", port=None, workers=2,
                 timeout=30, secret_file=None):
        super().__init__(port, workers, timeout)
        self.origin, self.slice_bytes, self.cache_size = origin, slice_bytes, cache_size
        self.secret_file = secret_file or default_job_secret()

    @property
    def headers(self):
        """The job's secret, as gpufsd sends it to a peer."""
        return secret_headers(self.secret_file)

    def _http_body(self):
        r = subprocess.run([PEER_CONFIG, "--listen", f"{LOOPBACK}:{self.port}",
                            "--origin", self.origin,
                            "--cache-dir", os.path.join(self.prefix, "cache"),
                            "--cache-size", self.cache_size, "--slice", f"{self.slice_bytes // 1024}k",
                            "--secret-file", self.secret_file],
                           capture_output=True, text=True, check=True)
        return r.stdout


class FaultProxy(_Nginx):
    """A reverse proxy at `url` in front of `upstream` (e.g. "http://127.0.0.1:8080") that
    delays, throttles and fails requests; see the module docstring.

    `control_url` is the control server; set() changes behaviour at run time, requests()
    and injected() count what it did. Settings and counts survive stop()/start()."""

    name = "nginx-proxy"

    def __init__(self, upstream, delay_ms=0, rate_bytes_per_s=0, port=None, workers=2,
                 timeout=30):
        super().__init__(port, workers, timeout)
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
            raise ValueError(f"cannot proxy {upstream!r}: want http://HOST:PORT")
        self.upstream = f"{parsed.hostname}:{parsed.port or 80}"
        self.control_port = free_port()
        self.control_url = f"http://{LOOPBACK}:{self.control_port}"
        self.state = {"delay_ms": delay_ms, "rate": rate_bytes_per_s, "fail_next": 0,
                      "fail_status": 503, "fail_body": s3_error_body(503),
                      "requests": 0, "injected": 0}

    @classmethod
    def skip_reason(cls):
        """Why a proxy cannot run here (no nginx, or no Lua module), or None when it can."""
        if nginx_binary() is None:
            return _config_error(())
        modules = lua_modules()
        if modules is None:
            return f"nginx Lua module not found in {' or '.join(MODULE_DIRS)} " \
                   f"({INSTALL_HINT})"
        return _config_error(tuple(modules))

    def set(self, delay_ms=None, rate_bytes_per_s=None, fail_next=0, fail_status=503):
        """Changes the delay and rate (None keeps them) and fails the next `fail_next`
        requests with `fail_status`; takes effect for requests that start after it."""
        args = {"fail_next": fail_next, "fail_status": fail_status}
        if delay_ms is not None:
            args["delay_ms"] = delay_ms
        if rate_bytes_per_s is not None:
            args["rate"] = rate_bytes_per_s
        body = s3_error_body(fail_status).encode()
        self._control("/set?" + urllib.parse.urlencode(args), body)
        self.state.update(args, fail_body=body.decode())

    def requests(self):
        """Requests that reached the proxy port, failed ones included."""
        return self._stats()["requests"]

    def injected(self):
        """Requests answered with an injected failure."""
        return self._stats()["injected"]

    def stop(self):
        """Stops nginx, keeping the settings, the counts and the failures still due."""
        if self.daemon and self.daemon.running():
            self.state.update(self._stats())
        super().stop()

    # --- nginx side -------------------------------------------------------------------

    def _modules(self):
        return tuple(lua_modules())

    def _ready_url(self):
        return self.control_url + "/stats"

    def _stats(self):
        text = self._control("/stats").decode()
        return {k: (v if k == "fail_body" else int(v))
                for k, v in (line.split("=", 1) for line in text.splitlines())}

    def _control(self, path, body=None):
        with urllib.request.urlopen(self.control_url + path, data=body, timeout=10) as r:
            return r.read()

    def _http_body(self):
        init = "\n".join(f"      s:set({k!r}, {_lua_str(v)})" for k, v in self.state.items())
        keys = " ".join(repr(k) + "," for k in self.state)
        return f"""  lua_shared_dict fault 1m;
  init_by_lua_block {{
      local s = ngx.shared.fault
{init}
  }}
  upstream backend {{
    server {self.upstream};
    keepalive 64;
  }}
  server {{
    listen {LOOPBACK}:{self.port};
    # Under TCP_CORK (the http block's tcp_nopush) a ranged answer of a few hundred KB is
    # often held ~40 ms: a stall no cloud store has, which would tax per-file readers.
    tcp_nopush off;
    client_max_body_size 0;
    location / {{
      # Set per request from the shared dict (0: no limit); applies to each response.
      set $fault_rate 0;
      limit_rate $fault_rate;
      # The headers go at once, and each body byte the rate allows goes out as it may, not
      # held for a packet's worth: at a few bytes a second the body trickles, which a
      # client sees as bytes coming, not as a stall.
      limit_rate_after 512;
      postpone_output 0;
      access_by_lua_block {{
        local s = ngx.shared.fault
        s:incr("requests", 1)
        local delay = s:get("delay_ms")
        if delay > 0 then ngx.sleep(delay / 1000) end
        local rate = s:get("rate")
        ngx.var.fault_rate = rate
        -- The check before the decrement keeps the count from running below zero for
        -- long; a result below zero (a race between workers) is not a failure.
        if s:get("fail_next") > 0 and s:incr("fail_next", -1) >= 0 then
          s:incr("injected", 1)
          ngx.status = s:get("fail_status")
          ngx.header["Content-Type"] = "application/xml"
          ngx.print(s:get("fail_body"))
          return ngx.exit(ngx.status)
        end
      }}
      # A pass-through: the client's Host (SigV4 signs it), all other headers and the URI
      # as sent. Request bodies stream; responses go through a small in-memory buffer and
      # never a temp file, so the upstream still feels a slow client. (Unbuffered
      # proxying would ignore limit_rate.)
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_request_buffering off;
      proxy_buffering on;
      proxy_buffers 16 64k;
      proxy_busy_buffers_size 128k;
      proxy_max_temp_file_size 0;
      proxy_read_timeout 300s;
    }}
  }}
  server {{
    listen {LOOPBACK}:{self.control_port};
    access_log off;
    location = /set {{
      content_by_lua_block {{
        local s = ngx.shared.fault
        ngx.req.read_body()
        local args = ngx.req.get_uri_args()
        for _, k in ipairs({{"delay_ms", "rate", "fail_next", "fail_status"}}) do
          if args[k] then s:set(k, tonumber(args[k])) end
        end
        s:set("fail_body", ngx.req.get_body_data() or "")
        ngx.say("ok")
      }}
    }}
    location = /stats {{
      content_by_lua_block {{
        local s = ngx.shared.fault
        for _, k in ipairs({{{keys}}}) do ngx.say(k, "=", s:get(k)) end
      }}
    }}
  }}
"""


def _lua_str(v):
    """A Python int or str as a Lua literal."""
    if isinstance(v, int):
        return str(v)
    return "[==[" + v + "]==]"
