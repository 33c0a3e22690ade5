"""Stands in for the get-pip bootstrap script that ansible-test downloads from its own server,
which this network cannot reach: install pip into the fresh virtual environment with the
standard library's ensurepip, then let that pip install the requested packages from the
configured Python index. Accepts get-pip's arguments."""
import subprocess
import sys

GET_PIP_ONLY_FLAGS = {"--no-setuptools", "--no-wheel"}


def main():
    requested = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_FLAGS]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *requested], check=True)


if __name__ == "__main__":
    main()
