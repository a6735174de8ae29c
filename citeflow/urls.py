"""Canonical URLs: one spelling per page, so the store and a run never hold the same page twice."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Query parameters that identify a campaign or a click, never the content.
TRACKING_PARAMS = frozenset(
    {
        "fbclid", "gclid", "gclsrc", "gbraid", "wbraid", "dclid", "msclkid", "twclid", "ttclid", "li_fat_id",
        "mc_cid", "mc_eid", "igshid", "yclid", "ref_src", "_hsenc", "_hsmi", "_ga", "_gl", "mkt_tok",
        "rb_clickid", "s_cid", "oly_enc_id", "oly_anon_id", "vero_id",
    }
)  # fmt: skip
DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_url(url: str, keep_fragment: bool = False) -> str:
    """Lower-case scheme and host, no default port, no fragment, no tracking parameters.

    Paths are kept as written: servers may treat them case-sensitively. URLs that are not
    http(s) (file:, local:) are returned with only the fragment removed. With `keep_fragment` (an
    ingested record: "...#p10" is a paragraph of its own, not the page fetched again) the fragment stays.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    fragment = parts.fragment if keep_fragment else ""
    if scheme not in DEFAULT_PORTS:
        return urlunsplit((scheme, parts.netloc, parts.path, parts.query, fragment))
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host
    if parts.port is not None and parts.port != DEFAULT_PORTS[scheme]:
        netloc = f"{host}:{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    query = urlencode(
        [
            (key, value)
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
            if not key.lower().startswith("utm_") and key.lower() not in TRACKING_PARAMS
        ]
    )
    return urlunsplit((scheme, netloc, parts.path or "/", query, fragment))


# The user info of a URL anywhere in a text: scheme://USER[:PASSWORD]@host. Credentials are often given this
# way (http://user:KEY@host/v1, postgres://user:pw@db/): it is cut wherever settings are shown or stored.
USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@]+@")


def redact_user_info(text: str) -> str:
    """`text` with the user info of every URL in it replaced by ***: http://***@host/v1."""
    return USER_INFO.sub(r"\1***@", text)


def has_user_info(text: str) -> bool:
    return USER_INFO.search(text) is not None
