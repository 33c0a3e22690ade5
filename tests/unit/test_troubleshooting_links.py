"""The roles' failure messages name the section of docs/troubleshooting.md that explains them
(issue #40 item 6): every link resolves to a heading of the page, and every section about a
failure is named by at least one message, so that neither side can drift from the other."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "troubleshooting.md"
LINK = re.compile(r"docs/troubleshooting\.md#([a-z0-9-]+)")
# Sections that no role message leads to: where to look first; what clients meet at the gateway
# (HTTP answers, not a run's failure); the weights engine's errors, which model_stage reports itself.
UNLINKED = {"when-a-run-fails", "where-to-look-first", "gateway-refusing-a-replica-or-a-client", "weights"}


def slug(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text):
    return [slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def links(root=REPO):
    """(path, anchor) for every link to the page in roles/ and playbooks/."""
    for path in sorted(list((root / "roles").rglob("*.yml")) + list((root / "playbooks").rglob("*.yml"))):
        for anchor in LINK.findall(path.read_text()):
            yield str(path.relative_to(root)), anchor


def test_every_link_in_a_message_names_a_section_of_the_page():
    sections = set(anchors(PAGE.read_text()))
    broken = [(path, anchor) for path, anchor in links() if anchor not in sections]
    assert not broken, "links to no heading of %s: %s" % (PAGE.relative_to(REPO), broken)


def test_every_section_about_a_failure_is_named_by_a_message():
    linked = {anchor for _path, anchor in links()}
    unnamed = [anchor for anchor in anchors(PAGE.read_text()) if anchor not in linked | UNLINKED]
    assert not unnamed, "sections no role message names: %s" % unnamed


def test_the_anchors_are_githubs(tmp_path):
    """The reader cannot pass by reading nothing: a heading's anchor is GitHub's, and a link in a
    role's task file is found at its anchor."""
    assert anchors("# When a run fails\n## Gateway refusing a replica or a client\nprose\n") == [
        "when-a-run-fails", "gateway-refusing-a-replica-or-a-client"]
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tasks / "main.yml").write_text("- ansible.builtin.fail:\n    msg: see (docs/troubleshooting.md#health-gate)\n")
    assert list(links(tmp_path)) == [("roles/r/tasks/main.yml", "health-gate")]
