"""gpufs-emulate: will this storage keep N accelerators fed?

Runs torchvision's ImageFolder + DataLoader over PATH as a training job does, one process
per accelerator, and in place of each step's forward/backward spends the time that model
takes on that accelerator (the profile table); then reports how much of the time the
accelerators waited for data, split into fetch (storage) and prep (decode, augmentation)
stall, and on a gpufs mount which tier the fetch stall came from."""
import argparse
import json
import os
import sys

from .profiles import ProfileError, choose, load_table, own_profile
from .report import text


class _Help(argparse.HelpFormatter):
    """Defaults where an option has one worth saying (not None, False or empty)."""

    def _get_help_string(self, action):
        if action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return action.help
        return f"{action.help} (default: {action.default})"


def parser(version="") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpufs-emulate", description=__doc__.split("\n\n")[0],
                                formatter_class=_Help)
    p.add_argument("--version", "-V", action="version", version=f"gpufs-emulate {version}")
    p.add_argument("path", nargs="?", help="an ImageFolder tree: a gpufs mount or any folder")
    p.add_argument("--model", default="resnet50", help="the profile's model")
    p.add_argument("--gpu", default="h100", help="the profile's accelerator")
    p.add_argument("--gpus", type=int, default=1, help="accelerators (ranks) on this node")
    p.add_argument("--batch", type=int, default=256, help="images per step per accelerator")
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers per rank")
    p.add_argument("--transform", choices=("raw", "decode", "train"), default="train",
                   help="raw: read only; decode: decode and crop; train: ImageNet augmentation")
    p.add_argument("--image-size", type=int, default=224, help="the crop the transform makes")
    p.add_argument("--images-per-second", type=float,
                   help="a profile of one's own: images/s of one accelerator")
    p.add_argument("--precision", help="only profiles of this precision (fp32, amp, ...)")
    p.add_argument("--profiles", action="append", default=[],
                   help="also read the profile files (*.json) of this folder")
    p.add_argument("--list-profiles", action="store_true", help="print the table and exit")
    p.add_argument("--epochs", type=int, default=1, help="measured epochs")
    p.add_argument("--steps", type=int, default=0,
                   help="at most this many steps per rank and epoch (0: whole epochs)")
    p.add_argument("--prep-steps", type=int, default=20,
                   help="steps per rank of the pass over data held in memory that measures the "
                        "prep stall (0: none; every wait then counts as fetch)")
    p.add_argument("--sync", choices=("step", "none"), default="step",
                   help="step: the ranks all-reduce once per step (gloo on loopback), as "
                        "data-parallel training does")
    p.add_argument("--seed", type=int, default=0, help="of the samplers' shuffles")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw each rank's busy/waiting timeline and images/s against demand")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--train-on", metavar="DEVICE",
                   help="really train --model on this torch device in place of the emulated "
                        "step (to check the emulator against real training)")
    p.add_argument("--record", metavar="FILE.json",
                   help="measure --model's training step at --batch on --device and add it to "
                        "this profile file")
    p.add_argument("--device", default="cuda", help="with --record: the torch device")
    p.add_argument("--record-steps", type=int, default=30, help="with --record: timed steps")
    p.add_argument("--amp", action="store_true", help="with --record: mixed precision")
    return p


def fail(message: str) -> int:
    print(f"gpufs-emulate: {message}", file=sys.stderr)
    return 2


def profile_of(args, table):
    if args.images_per_second:
        if args.images_per_second <= 0:
            raise ProfileError("--images-per-second must be positive")
        return own_profile(args.images_per_second, args.model, args.batch)
    try:
        return choose(table, args.model, args.gpu, args.batch, args.precision)
    except ProfileError:
        if args.train_on:  # the real steps give the rate (run.py)
            return None
        raise


def list_profiles(table) -> int:
    for p in sorted(table, key=lambda p: (p.model, p.accelerator, p.batch, p.precision)):
        print(f"{p.model:<10} {p.accelerator:<6} batch {p.batch:>4} {p.precision:<5} "
              f"{p.images_per_second:>9,.1f} images/s  {p.cite()}")
    return 0


def validate(args):
    for name in ("gpus", "batch", "image_size", "epochs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("workers", "steps", "prep_steps"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must not be negative")
    if not args.path:
        raise ValueError("give PATH, an ImageFolder tree (class folders of images)")
    if not os.path.isdir(args.path):
        raise ValueError(f"{args.path}: not a folder")
    if args.train_on and args.transform == "raw":
        raise ValueError("--train-on needs images: --transform decode or train")


def main(profile_dirs, here: str, argv=None, version="") -> int:
    args = parser(version).parse_args(argv)
    try:
        table = load_table(list(profile_dirs) + args.profiles)
        if args.list_profiles:
            return list_profiles(table)
        if args.record:
            from .record import record
            entry = record(args.record, args.model, args.gpu, args.batch, args.device,
                           args.image_size, args.record_steps, args.amp)
            print(json.dumps(entry))
            return 0
        validate(args)
        profile = profile_of(args, table)
    except (ProfileError, ValueError) as e:
        return fail(str(e))
    from .run import emulate  # torch and torchvision load only when a run needs them
    try:
        run = emulate(args, profile, here)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        return fail(str(e))
    if args.plot:
        from .plot import draw
        draw(run, args.plot)
    sys.stdout.write(json.dumps(run, indent=1) + "\n" if args.json else text(run))
    return 0
