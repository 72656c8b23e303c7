"""Where a submit's Location header leads: one rule for every lesson that answers 202 with a Location."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit


def location_target(response) -> str | None:
    """The URL to follow on this server, or None.  `/exports/{id}` and an absolute URL of the same server
    (`http://127.0.0.1:PORT/exports/{id}`; `http://testserver/...` under a TestClient) are the same job: both
    are valid HTTP.  A URL on another host, or with a query or fragment, is not."""
    location = response.headers.get("location")
    if not location:
        return None
    here = urlsplit(str(response.request.url))
    target = urlsplit(urljoin(str(response.request.url), location))
    if (target.scheme, target.netloc) != (here.scheme, here.netloc) or target.query or target.fragment:
        return None
    return target.geturl()
