"""Helpers shared by the benchmarks."""
import os
import subprocess
import tempfile


def drop_caches():
    """Empties the page, dentry and inode caches; False (and nothing done) unless root."""
    if os.geteuid() != 0:
        return False
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


class SlowVolume:
    """An ext4 image on a loop device whose reads are throttled by a blkio cgroup."""

    def __init__(self, size_mb, iops, mbps):
        self.dir = tempfile.mkdtemp(prefix="gpufs-slow-")
        self.image = os.path.join(self.dir, "disk.img")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        sh("truncate", "-s", f"{size_mb + 64}M", self.image)
        # Inode tables initialised now, not by a background thread competing with the runs.
        sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image)
        self.loop = sh("losetup", "--find", "--show", self.image)
        sh("mount", self.loop, self.mnt)
        # The throttle counts requests after the block layer splits them; a real volume
        # takes large requests whole, so let the loop device take them as large as it can.
        queue = f"/sys/block/{os.path.basename(self.loop)}/queue"
        with open(f"{queue}/max_hw_sectors_kb") as f:
            self.max_kb = int(f.read())
        with open(f"{queue}/max_sectors_kb", "w") as f:
            f.write(str(self.max_kb))
        major, minor = os.major(os.stat(self.loop).st_rdev), os.minor(os.stat(self.loop).st_rdev)
        self.device = f"{major}:{minor}"
        self.group = f"/sys/fs/cgroup/blkio/gpufs-bench-{os.getpid()}"
        os.makedirs(self.group, exist_ok=True)
        for knob, value in (("read_iops_device", iops), ("read_bps_device", mbps * 1000 * 1000)):
            with open(os.path.join(self.group, "blkio.throttle." + knob), "w") as f:
                f.write(f"{major}:{minor} {value}\n")

    def enter(self, pid):
        """Throttles the reads of process `pid` (and of the children it starts later)."""
        with open(os.path.join(self.group, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def close(self):
        with open(os.path.join(self.group, "cgroup.procs")) as f:
            for pid in f.read().split():
                with open("/sys/fs/cgroup/blkio/cgroup.procs", "w") as root:
                    try:
                        root.write(pid)
                    except OSError:
                        pass  # exited meanwhile
        os.rmdir(self.group)
        sh("umount", self.mnt)
        sh("losetup", "-d", self.loop)
        sh("rm", "-rf", self.dir)
