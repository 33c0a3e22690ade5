"""The bytecode cache for zip imports of the test images and of the controller's test stages
(tests/images/zipimport/zipimport_bytecode_cache.py, loaded here as the controller loads it: by
the sitecustomize.py beside it, its directory on PYTHONPATH): a second interpreter importing the
same source from another zip compiles nothing and names the other zip in its tracebacks, as an
uncached import would; a cache directory that someone else could write, or an entry that does not
load, means compiling as before."""
import json
import os
import pathlib
import subprocess
import sys
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
ZIPIMPORT_DIR = HERE.parent / "images" / "zipimport"

# Imports module `boom` from the zip given, with the cache in the directory given, and reports
# how many sources were compiled and the file its function's traceback names.
IMPORT_FROM_ZIP = """
import json, sys, traceback
import zipimport_bytecode_cache as cache
cache._cache_dir = sys.argv[2]
compiled = []
uncached = cache._compile_uncached
cache._compile_uncached = lambda path, source: compiled.append(path) or uncached(path, source)
sys.path.insert(0, sys.argv[1])
import boom
try:
    boom.fail()
except RuntimeError as error:
    filename = traceback.extract_tb(error.__traceback__)[-1].filename
print(json.dumps({"compiled": compiled, "filename": filename}))
"""


def module_zip(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("boom.py", "def fail():\n    raise RuntimeError('from the zip')\n")
    return str(path)


def import_from(archive, cache_dir):
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_FROM_ZIP, archive, str(cache_dir)],
        env={**os.environ, "PYTHONPATH": str(ZIPIMPORT_DIR)}, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def test_a_second_import_from_another_zip_compiles_nothing_and_names_its_own_zip(tmp_path):
    cache_dir = tmp_path / "cache"
    first = import_from(module_zip(tmp_path / "first.zip"), cache_dir)
    second_zip = module_zip(tmp_path / "second.zip")
    second = import_from(second_zip, cache_dir)
    assert first["compiled"] == [f"{tmp_path}/first.zip/boom.py"]
    assert second["compiled"] == []
    assert second["filename"] == f"{second_zip}/boom.py"
    assert len(list(cache_dir.iterdir())) == 1


def test_a_cache_others_can_write_is_not_read_nor_written(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o777)
    cache_dir.chmod(0o777)
    archive = module_zip(tmp_path / "module.zip")
    # zipimport compiles a module once for its file name and once for its code (Python 3.11 to
    # 3.13, zipimporter.get_filename): uncached, both times.
    for run in ("first", "second"):
        assert set(import_from(archive, cache_dir)["compiled"]) == {f"{archive}/boom.py"}, run
    assert not list(cache_dir.iterdir())


def test_an_entry_that_does_not_load_is_compiled_again(tmp_path):
    cache_dir = tmp_path / "cache"
    archive = module_zip(tmp_path / "module.zip")
    import_from(archive, cache_dir)
    (entry,) = cache_dir.iterdir()
    entry.write_bytes(b"not marshalled code")
    again = import_from(archive, cache_dir)
    assert again["compiled"] == [f"{archive}/boom.py"]
    assert again["filename"] == f"{archive}/boom.py"
    assert import_from(archive, cache_dir)["compiled"] == []
