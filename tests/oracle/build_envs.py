"""Builds (once) and locates virtual environments holding the REAL SGLang release wheels.

They give the tests SGLang's own argument parser without a GPU: the wheels are installed with
--no-deps next to the CPU build of torch and only the distributions that importing
``sglang.srt.server_args`` and ``sglang.launch_server`` needs, each at the version that
release itself requires (read from ``importlib.metadata.requires("sglang")``).

Layout under ${PRO6000_CACHE:-~/.cache/pro6000}/sglang-oracle/, everything keyed by a hash of
this recipe, so a changed recipe builds anew and an unchanged one costs nothing:

    base-<hash>/          venv: torch (CPU), triton, torchvision and the packages no release pins
    <release>-<hash>/     venv layered on base through a .pth file: sglang==<release> and the
                          rest at that release's pins (pip sees base's packages as installed)

Release layers build side by side once the base exists. Usage:
build_envs.py [RELEASE ...]   (default: every release in RELEASES); prints the timings.
"""
import concurrent.futures
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

RELEASES = ("0.5.9", "0.5.14", "0.5.19", "0.5.21", "0.5.23")

# The CPU build is the only torch allowed here (it lies on these machines as a file); the
# "+cpu" local version never matches a CUDA build.
TORCH = "torch==2.13.0+cpu"
# torch's CPU build does not pull triton; SGLang imports it. 0.28 is torchvision for torch 2.13.
BASE_PACKAGES = ("triton==3.8.0", "numpy", "pillow")
TORCHVISION = "torchvision==0.28.0"
# Distributions imported while building the parser and printing launch_server --help (found by
# importing each release). Each release layer installs them all under its own pins; those no
# release pins are preinstalled in the shared base, so a layer only adds what it pins.
PARSER_PACKAGES = (
    "aiohttp", "dill", "huggingface-hub", "ipython", "msgspec", "openai", "orjson", "packaging",
    "partial-json-parser", "psutil", "pybase64", "pydantic", "pyzmq", "requests",
    "sentencepiece", "starlette", "tqdm", "transformers", "xgrammar",
)
PINNED_BY_RELEASES = ("openai", "sentencepiece", "transformers", "xgrammar")
# Provided by the base environment: a release's pins on these (CUDA builds) are not followed.
BASE_OWNED = {"torch", "torchvision", "torchaudio", "triton"}

HERE = pathlib.Path(__file__).resolve().parent
HOOK = HERE / "torchvision_cpu_ops.py"
# The only torch here is that CPU build, a wheel for CPython 3.11 (pip's find-links), so the
# parsers' environments run on a 3.11 whatever Python the toolchain runs on (3.12 since
# ansible-core 2.21): PRO6000_ORACLE_PYTHON names one, else python3.11 on PATH.
PYTHON = os.environ.get("PRO6000_ORACLE_PYTHON") or shutil.which("python3.11") or sys.executable


def cache_root():
    base = os.environ.get("PRO6000_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pro6000")
    return pathlib.Path(base) / "sglang-oracle"


def _digest(*parts):
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _python_tag():
    out = subprocess.run([PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _shared_packages():
    return [name for name in PARSER_PACKAGES if name not in PINNED_BY_RELEASES]


def base_key():
    """The recipe is this file and the hook it installs: any change to either builds anew."""
    return _digest(_python_tag(), pathlib.Path(__file__).read_text(), HOOK.read_text())


def release_key(release):
    return _digest(base_key(), release)


def _run(cmd, log, step=None):
    """Runs a build step (timed into ``log`` when it has a name); a failure shows the output."""
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONWARNINGS": "ignore"})
    if step:
        log.append((step, round(time.monotonic() - started, 1)))
    if proc.returncode:
        raise RuntimeError("oracle build step failed (exit %d): %s\n%s" % (
            proc.returncode, " ".join(map(str, cmd)), (proc.stdout + proc.stderr)[-4000:]))
    return proc.stdout


def _purelib(venv):
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return _run([venv / "bin" / "python", "-c", code], []).strip()


def _build_base(target, log):
    _run([PYTHON, "-m", "venv", target], log, "venv")
    py = target / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--no-compile"]  # bytecode: at first import, of what is used
    _run(pip + [TORCH, *BASE_PACKAGES, *_shared_packages()], log, "torch (CPU) and shared packages")
    _run(pip + ["--no-deps", TORCHVISION], log, "torchvision")
    site = pathlib.Path(_purelib(target))
    shutil.copy(HOOK, site / "_pro6000_torchvision_cpu_ops.py")
    (site / "_pro6000_torchvision_cpu_ops.pth").write_text("import _pro6000_torchvision_cpu_ops as m; m.install()\n")
    # Compile the shared modules' bytecode once here, not in each release build at once.
    _run([py, "-c", "import aiohttp, huggingface_hub, IPython, pydantic, torch, torchvision, triton"],
         log, "first import")


def _release_constraints(py, log):
    """The release's own requirements as pip constraints (extras dropped: constraints cannot
    carry them), less what the base environment owns, plus the CPU torch."""
    code = "import importlib.metadata as m, json; print(json.dumps(m.requires('sglang') or []))"
    lines = [TORCH]
    for requirement in json.loads(_run([py, "-c", code], [])):
        spec, marker = requirement.partition(";")[::2]
        if "extra ==" in marker:
            continue
        name = re.split(r"[\s\[<>=!~]", spec.strip(), maxsplit=1)[0]
        if name.lower().replace("_", "-") in BASE_OWNED:
            continue
        line = re.sub(r"\[[^\]]*\]", "", spec.strip())
        lines.append(line + (";" + marker if marker.strip() else ""))
    return "\n".join(lines) + "\n"


def _build_release(target, release, base, log):
    # No pip of its own: base's pip, visible through the .pth file, installs into this venv.
    _run([PYTHON, "-m", "venv", "--without-pip", target], log, "venv")
    py = target / "bin" / "python"
    # A .pth "import" line: addsitedir also runs base's own .pth files (the torchvision hook).
    (pathlib.Path(_purelib(target)) / "_pro6000_oracle_base.pth").write_text(
        "import site; site.addsitedir(%r)\n" % _purelib(base))
    pip = [py, "-m", "pip", "install", "-q", "--no-compile"]
    _run(pip + ["--no-deps", "sglang==" + release], log, "sglang wheel")
    constraints = target / "constraints.txt"
    constraints.write_text(_release_constraints(py, log))
    # Naming the shared packages too makes pip check base's copies against this release's pins.
    _run(pip + ["-c", constraints, *PARSER_PACKAGES], log, "packages at the release's pins")
    # The environment counts as built only once the real launch_server prints its options
    # (which also compiles the bytecode of everything the tests import, once).
    printed = _run([py, "-m", "sglang.launch_server", "--help"], log, "first launch_server --help")
    if printed.count("\n  --") < 100:
        raise RuntimeError("sglang %s --help listed few options:\n%s" % (release, printed[-2000:]))


def _ensure(name, key, build):
    """Returns cache_root()/<name>-<key>, building it under a lock when missing."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / ("%s-%s" % (name, key))
    if (final / "ready").exists():
        return final, []
    with open(root / (".%s.lock" % name), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be building the same thing
        if (final / "ready").exists():
            return final, []
        log = []
        try:
            # venvs are not relocatable: build at the final path (a half-built one from a killed
            # run is cleared first) and mark it ready last.
            shutil.rmtree(final, ignore_errors=True)
            build(final, log)
            (final / "ready").write_text(json.dumps({"key": key, "steps": log}))
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        for stale in root.glob(name + "-*"):  # older recipes of the same thing
            if stale != final and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        return final, log


def ensure_base():
    return _ensure("base", base_key(), _build_base)


def ensure_release(release):
    """Path of the interpreter of the oracle environment for ``release``, built if needed."""
    base = ensure_base()[0]
    venv, log = _ensure(release, release_key(release),
                        lambda target, steps: _build_release(target, release, base, steps))
    return venv / "bin" / "python", log


def ensure_all(releases=RELEASES, report=None):
    """{release: interpreter} for every release, building the missing ones side by side
    (downloads overlap; the base is built first, once). ``report`` receives progress lines."""
    report = report or (lambda line: None)
    started = time.monotonic()
    log = ensure_base()[1]
    _report("base", log, started, report)

    def one(release):
        began = time.monotonic()
        python, steps = ensure_release(release)
        _report("sglang " + release, steps, began, report)
        return release, python

    with concurrent.futures.ThreadPoolExecutor(len(releases)) as pool:
        pythons = dict(pool.map(one, releases))
    report("oracle environments ready in %.1f s" % (time.monotonic() - started))
    return pythons


def _report(what, steps, began, report):
    for step, seconds in steps:
        report("  %6.1f s  %s: %s" % (seconds, what, step))
    report("%s: %.1f s%s" % (what, time.monotonic() - began, "" if steps else " (cached)"))


def main(argv):
    for release, python in ensure_all(tuple(argv) or RELEASES, report=print).items():
        print("%s %s" % (release, python))


if __name__ == "__main__":
    main(sys.argv[1:])
