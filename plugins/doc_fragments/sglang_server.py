# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the modules reach an SGLang server: one description for sglang_probe and sglang_bench."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the server, without a trailing path such as C(/v1).
      - Loopback addresses are always reached directly; other hosts honour C(http_proxy),
        C(https_proxy) and C(no_proxy) from the environment.
      - "Credentials in the URL (C(user:password@)) are neither sent nor shown: messages and
        results name the URL without them. Use O(api_key)."
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description:
      - "API key the server was started with (C(--api-key)); sent as C(Authorization: Bearer)."
    type: str
  validate_certs:
    description:
      - Verify the server's TLS certificate and host name for C(https) URLs.
    type: bool
    default: true
  ca_path:
    description:
      - File with the certificate authorities that sign the server's certificate, instead of
        the system's trust store.
    type: path
notes:
  - Whatever the server sends ends in a result or a failure that names the URL, never a
    traceback. Each answer may be at most 64 MiB (headers and body), all answers of one phase
    1 GiB together, and one server-sent event 1 MiB; a longer one, malformed HTTP framing
    (such as a chunk size that is not hexadecimal) or JSON of another shape than SGLang sends
    fails that request.
"""
