"""Real servers for the tests and benchmarks, started and stopped from Python: a one-node
Ceph S3 store (ceph_s3.CephS3, or ceph_s3.shared() for one per process), an nginx static
origin (nginx.NginxOrigin) and an nginx/Lua proxy that adds latency, limits rate and injects
failures (nginx.FaultProxy).

Everything listens on 127.0.0.1 only, lives in a fresh temp dir and is stopped by pid."""
