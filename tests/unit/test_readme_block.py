"""tests/scripts/readme_block.py, which hands the README's examples to the tests that run them
(the controller-install stage, the default scenario's verifier): each marker they name has its
block in README.md, and a marker without one is a clear error, not an empty script that passes."""
import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "scripts"
sys.path.insert(0, str(SCRIPTS))
from readme_block import readme_block  # noqa: E402


@pytest.mark.parametrize("name, first_line", [
    ("controller-install", "python3 -m venv ~/pro6000-venv && . ~/pro6000-venv/bin/activate"),
    ("endpoint-curl", "curl -sS http://127.0.0.1:30000/v1/chat/completions \\"),
    ("endpoint-openai-install", "python3 -m venv ~/openai-client"),
    ("endpoint-openai", "import os"),
    ("lock", "ansible-playbook pro6000.inference.lock \\"),
])
def test_each_example_the_tests_run_is_in_the_readme(name, first_line):
    block = readme_block(name)
    assert block.splitlines()[0] == first_line
    assert block.endswith("\n") and "```" not in block


def test_the_block_ends_at_its_own_fence(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- readme-example: one -->\n```bash\necho one\n```\n\n```bash\necho two\n```\n")
    assert readme_block("one", readme) == "echo one\n"


def test_a_marker_without_a_block_is_an_error_naming_it(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- readme-example: one -->\nprose, no fence\n```bash\necho late\n```\n")
    with pytest.raises(LookupError, match="readme-example: one"):
        readme_block("one", readme)
    with pytest.raises(LookupError, match="readme-example: two"):
        readme_block("two", readme)


def test_the_command_line_fails_without_the_block():
    run = subprocess.run([sys.executable, str(SCRIPTS / "readme_block.py"), "no-such-example"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 1 and "readme-example: no-such-example" in run.stderr and not run.stdout
