# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What model_stage refuses before anything is read or written: bad options, repository ids,
revisions, paths and URLs; and model configs that are not what their kind needs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
from urllib.parse import urlsplit

from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError, mask_secrets


COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# The hub's repository id rule (huggingface_hub utils/_validators.py, validate_repo_id): an
# optional namespace and a name of ASCII letters, digits, "_", "-", "." (at most 96 each), not
# starting or ending with "-" or ".", without "--" or "..", not ending in ".git".
REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?/)?[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?$",
                        re.ASCII)
# A revision is a commit or a git ref name (git check-ref-format): no "..", "//", "@{", control
# characters, spaces or ~^:?*[\ ; no component starting with "." or ending in ".lock".
REVISION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,254}$")


def check_repo_id(repo_id, name="repo_id"):
    if not isinstance(repo_id, str) or not REPO_ID_RE.match(repo_id) or "--" in repo_id or ".." in repo_id \
            or repo_id.endswith(".git"):
        raise WeightsError("%s %r is not a hub repository id: [namespace/]name of letters, digits, '_', '-' and '.', "
                           "not starting or ending with '-' or '.', without '--' or '..'" % (name, repo_id))
    return repo_id


def check_revision(revision, name="revision"):
    parts = revision.split("/") if isinstance(revision, str) else []
    if (not REVISION_RE.match(revision or "") or ".." in revision or "//" in revision or "@{" in revision
            or revision.endswith("/") or any(p.startswith(".") or p.endswith(".lock") for p in parts)):
        raise WeightsError("%s %r is not a commit or a git ref name (letters, digits, '_', '-', '.', '/'; no '..', "
                           "no component starting with '.')" % (name, revision))
    return revision


def passes(check, value):
    """Whether a string passes one of the check_* rules (Ansible test plugins ask it)."""
    if not isinstance(value, str):
        return False
    try:
        check(value)
    except WeightsError:
        return False
    return True


def check_dir_path(path, name):
    """An absolute, normalised directory path below / of printable UTF-8 (a newline would end a
    line of what names it, "/" would make the model root the file system's)."""
    if (not isinstance(path, str) or not path.startswith("/") or path == "/" or os.path.normpath(path) != path
            or not path.isprintable() or not utf8(path)):
        raise WeightsError("%s %r must be an absolute, normalised directory path other than '/', without '~', '..', "
                           "'.', a trailing '/' or control characters" % (name, path))
    return path


def check_manifest_name(manifest_name, name="manifest_name"):
    """A manifest is read from inside the source: a relative path that stays there."""
    parts = manifest_name.split("/") if isinstance(manifest_name, str) else [""]
    if (not isinstance(manifest_name, str) or manifest_name.startswith("/") or any(part in ("", ".", "..") for part in parts)
            or not manifest_name.isprintable() or "\\" in manifest_name or not utf8(manifest_name)):
        raise WeightsError("%s %r must be a file name inside the mirror's revision or the source path: relative, "
                           "without '..', '.', empty parts or control characters" % (name, manifest_name))
    return manifest_name


def utf8(text):
    """Whether text encodes as UTF-8 (a file name of undecodable bytes carries lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_url(url, name):
    """Only http and https: urllib would read file:// and ftp:// as well."""
    scheme = urlsplit(url or "").scheme.lower()
    if scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise WeightsError("%s %r must be an http:// or https:// URL" % (name, mask_secrets(url or "")))
    return url


def check_params(params):
    """Refuse bad input before anything is read or written, naming the option."""
    dest = params["dest"]
    if not dest.startswith("/") or os.path.normpath(dest) != dest or dest == "/" or not dest.isprintable() \
            or not utf8(dest):
        raise WeightsError("dest %r must be an absolute, normalised path (no '~', '..', '.', trailing '/' or control "
                           "characters)" % dest)
    check_manifest_name(params["manifest_name"])
    if params["repo_id"] is not None:
        check_repo_id(params["repo_id"])
    check_revision(params["revision"])
    if params["source"] == "mirror":
        check_url(params["mirror_url"], "mirror_url")
    if params["source"] == "path" and not os.path.isabs(params["source_path"]):
        raise WeightsError("source_path %r must be an absolute path" % params["source_path"])
    for name in ("dir_mode", "file_mode"):
        if not re.match(r"^0?[0-7]{3,4}$", params[name]):
            raise WeightsError("%s must be an octal mode such as 0755, not %r" % (name, params[name]))
        if int(params[name], 8) & 0o7022:
            # Root creates, renames and re-modes files there: nobody else may change a name in it.
            raise WeightsError("%s %s lets the group or others write (or sets a special bit): the weights are root's, "
                               "read by the group" % (name, params[name]))
    for name, least in (("workers", 1), ("timeout", 1), ("retries", 0), ("keep_previous", 0), ("reserve_bytes", 0)):
        if params[name] < least:
            raise WeightsError("%s must be at least %d, not %d" % (name, least, params[name]))


def load_config(root):
    path = os.path.join(root, "config.json")
    try:
        with open(path) as stream:
            config = json.load(stream)
    except (IOError, OSError) as exc:
        raise WeightsError("%s cannot be read: %s" % (path, exc))
    except ValueError as exc:
        raise WeightsError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(config, dict):
        raise WeightsError("%s is not a JSON object" % path)
    return config


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# SGLang's get_context_length (python/sglang/srt/utils/hf_transformers/common.py of 0.5.23,
# hf_transformers_utils.py before): the first of these keys, times the rope scaling factor
# unless the scaling keeps the original length; 2048 when none is set.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")


def context_length(config):
    """The context a checkpoint declares, as SGLang derives it from its (text) config."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    rope = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else {}
    keeps = "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3"
    factor = 1 if keeps else rope.get("factor", 1)
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * text[key])
    return 2048


def target_facts(config, origin):
    """model_type and layer count of a target config (top level or text_config, as Qwen3.5 has it)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    if not _int(layers) or layers < 1:
        raise WeightsError("%s: num_hidden_layers is missing or not a positive integer" % origin)
    return {
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures") or [],
        "num_hidden_layers": layers,
        "context_length": context_length(config),
    }


def drafter_facts(config, origin, target_layers):
    """The DFlash fields a drafter must carry; target_layers (or None) bounds target_layer_ids."""
    architectures = config.get("architectures") or []
    auto_map = config.get("auto_map") or {}
    mapped = [str(value) for value in auto_map.values()] if isinstance(auto_map, dict) else []
    if "DFlashDraftModel" not in architectures and not any(v.endswith("DFlashDraftModel") for v in mapped):
        raise WeightsError("%s is not a DFlash drafter: architectures %s and auto_map %s name no DFlashDraftModel"
                           % (origin, architectures, mapped))
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        raise WeightsError("%s: dflash_config is missing" % origin)
    block_size = dflash.get("block_size", config.get("block_size"))
    if not _int(block_size) or block_size < 2:
        raise WeightsError("%s: block_size is missing or not an integer >= 2 (found %r)" % (origin, block_size))
    layer_ids = dflash.get("target_layer_ids")
    if not isinstance(layer_ids, list) or not layer_ids or not all(_int(i) for i in layer_ids):
        raise WeightsError("%s: dflash_config.target_layer_ids must be a non-empty list of integers" % origin)
    if target_layers is not None:
        outside = [i for i in layer_ids if i < 0 or i >= target_layers]
        if outside:
            raise WeightsError("%s: dflash_config.target_layer_ids %s lie outside the target's %d layers (0..%d)"
                               % (origin, outside, target_layers, target_layers - 1))
    mask_token_id = dflash.get("mask_token_id", config.get("mask_token_id"))
    if not _int(mask_token_id):
        raise WeightsError("%s: dflash_config.mask_token_id is missing" % origin)
    return {
        "block_size": block_size,
        "target_layer_ids": layer_ids,
        "mask_token_id": mask_token_id,
        "layer_types": config.get("layer_types") or [],
        "sliding_window": config.get("sliding_window"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "context_length": context_length(config),
    }
