"""Prints (or returns) the code block of README.md that follows the line
"<!-- readme-example: NAME -->", so that the tests run the README's examples as written.

    python3 tests/scripts/readme_block.py NAME
"""
import pathlib
import re
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def readme_block(name, readme=README):
    """The body of the fenced block right after the marker; an error naming the marker without one."""
    match = re.search(r"^<!-- readme-example: %s -->\n```[a-z]*\n(.*?)^```$" % re.escape(name),
                      readme.read_text(), re.MULTILINE | re.DOTALL)
    if not match:
        raise LookupError("%s: no fenced block after '<!-- readme-example: %s -->'" % (readme, name))
    return match.group(1)


if __name__ == "__main__":
    try:
        sys.stdout.write(readme_block(sys.argv[1]))
    except (IndexError, LookupError) as exc:
        sys.exit(str(exc) if isinstance(exc, LookupError) else __doc__)
