#!/usr/bin/python3
"""An unmodified torchvision ImageFolder + DataLoader reads the mount as it reads the source.

Runs Debian's python3-torchvision (/usr/bin/python3) over a real mount and over the source
ImageFolder tree: same classes, class_to_idx, samples, raw bytes and decoded tensors.
"""
import hashlib
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import gpufs_testlib as lib  # noqa: E402

try:
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
except ImportError as e:  # the suite installs it; say so rather than pass silently
    print(f"SKIP: torchvision is not importable ({e}); apt-get install python3-torchvision")
    sys.exit(lib.SKIP)


def raw_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def digest_loader(path):
    return hashlib.sha256(raw_bytes(path)).hexdigest()


def relative_samples(dataset):
    return [(os.path.relpath(p, dataset.root), t) for p, t in dataset.samples]


def epoch(dataset, workers):
    """(sample index, target, payload) for one shuffled epoch through a DataLoader."""
    indexed = IndexedDataset(dataset)
    loader = DataLoader(indexed, batch_size=5, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(0), collate_fn=list)
    return sorted(item for batch in loader for item in batch)


class IndexedDataset(torch.utils.data.Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        sample, target = self.inner[i]
        if torch.is_tensor(sample):
            sample = hashlib.sha256(sample.numpy().tobytes()).hexdigest()
        return (i, target, sample)


class TorchvisionOverMount(lib.MountedSampleCase):
    CLASSES, PER_CLASS, GROUP_SIZE = 6, 8, 4

    def test_same_classes_and_samples(self):
        a = datasets.ImageFolder(self.tree)
        b = datasets.ImageFolder(self.mnt)
        self.assertEqual(a.classes, b.classes)
        self.assertEqual(a.class_to_idx, b.class_to_idx)
        self.assertEqual(relative_samples(a), relative_samples(b))
        self.assertEqual(len(b), 48)

    def test_dataloader_reads_the_same_bytes(self):
        for workers in (0, 2):
            a = epoch(datasets.ImageFolder(self.tree, loader=digest_loader), workers)
            b = epoch(datasets.ImageFolder(self.mnt, loader=digest_loader), workers)
            self.assertEqual(len(b), 48)
            self.assertEqual(a, b)

    def test_dataloader_decodes_the_same_images(self):
        transform = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
        a = epoch(datasets.ImageFolder(self.tree, transform=transform), 2)
        b = epoch(datasets.ImageFolder(self.mnt, transform=transform), 2)
        self.assertEqual(a, b)


class TorchvisionOverPackWithSplits(unittest.TestCase):
    """gpufsd pack of a tree with train/ and val/, read by torchvision per split."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.work = tempfile.mkdtemp(prefix="gpufs-e2e-pack-")
        cls.tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (5, 8), (5, 4))
        out = os.path.join(cls.work, "packed")
        result = lib.run_gpufsd("pack", cls.tree, out, "--group-bytes", "100KiB")
        assert result.returncode == 0, result.stderr
        cls.mount = lib.Mount(out)
        cls.mnt = cls.mount.__enter__()

    @classmethod
    def tearDownClass(cls):
        import shutil
        cls.mount.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def test_each_split_reads_like_the_source(self):
        for split, count in (("train", 40), ("val", 20)):
            a = datasets.ImageFolder(os.path.join(self.tree, split), loader=digest_loader)
            b = datasets.ImageFolder(os.path.join(self.mnt, split), loader=digest_loader)
            self.assertEqual(a.class_to_idx, b.class_to_idx)
            self.assertEqual(relative_samples(a), relative_samples(b))
            self.assertEqual(len(b), count)
            self.assertEqual(epoch(a, 2), epoch(b, 2))


class TorchvisionOverS3(unittest.TestCase):
    """A pack uploaded to a real S3 store (Ceph's radosgw), mounted by URL: one shuffled,
    decoded epoch equals the source tree's."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        sys.path.insert(0, lib.ROOT)
        from tests.servers import ceph_s3
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-e2e-s3-")
        cls.tree = os.path.join(cls.work, "tree")
        lib.make_sample.make_tree(cls.tree, 5, 8, 3, True, 160)
        out = os.path.join(cls.work, "packed")
        result = lib.run_gpufsd("pack", cls.tree, out, "--group-bytes", "128KiB")
        assert result.returncode == 0, result.stderr
        cls.s3 = ceph_s3.CephS3().__enter__()
        cls.s3.make_bucket("imagenet")
        cls.s3.upload_tree(out, "imagenet", "train")
        env = {**os.environ, **cls.s3.env(), "XDG_CACHE_HOME": os.path.join(cls.work, "xdg")}
        cls.mount = lib.Mount("s3://imagenet/train/", env=env)
        cls.mnt = cls.mount.__enter__()

    @classmethod
    def tearDownClass(cls):
        import shutil
        cls.mount.__exit__(None, None, None)
        cls.s3.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def test_an_epoch_over_s3_decodes_like_the_source(self):
        transform = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
        a = datasets.ImageFolder(self.tree, transform=transform)
        b = datasets.ImageFolder(self.mnt, transform=transform)
        self.assertEqual(relative_samples(a), relative_samples(b))
        self.assertEqual(len(b), 40)
        self.assertEqual(epoch(a, 2), epoch(b, 2))


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
