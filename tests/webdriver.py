"""Just enough of the W3C WebDriver protocol to drive headless Chromium from the tests.

Selenium would bring six more packages for the five calls used here: start a session, open a URL, run a
script, click, read the browser's console and network logs.  chromedriver speaks plain HTTP+JSON, so a
page of httpx does it.  Skipped, with the one command that fixes it, where Chromium is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx2 as httpx
import pytest

from shared.proc import free_port, wait_until

PACKAGES = ("chromium", "chromium-driver", "fonts-wqy-microhei")  # the font: Chinese text in screenshots
INSTALL = "as root: apt-get install -y " + " ".join(PACKAGES)
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def available() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def install_if_root() -> None:
    """Install the browser the way the kit installs its servers: only as root, only when missing (once,
    before the test workers start: tests/conftest.py)."""
    font = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
    if (available() and font.exists()) or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(install, env=env, capture_output=True)


def require() -> tuple[str, str]:
    found = available()
    if found is None:
        pytest.skip(f"chromium and chromedriver are not installed ({INSTALL})")
    return found


class Browser:
    """One headless Chromium session.  Use as a context manager; screenshots go where you say."""

    def __init__(self, profile: Path, size=(1200, 900)):
        self.browser, driver = require()
        self.port = free_port()
        profile.mkdir(parents=True, exist_ok=True)
        self.driver = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=dict(os.environ, HOME=str(profile)),
                                       start_new_session=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        self._wait_ready()
        caps = {"browserName": "chrome",
                "goog:chromeOptions": {"binary": self.browser, "args": [
                    "--headless=new", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
                    f"--user-data-dir={profile / 'chrome'}", f"--window-size={size[0]},{size[1]}"]},
                "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"}}
        reply = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = reply["sessionId"]

    def _wait_ready(self) -> None:
        def ready():
            if self.driver.poll() is not None:
                raise RuntimeError("chromedriver exited at start")
            try:
                return self.http.get("/status").json()["value"].get("ready")
            except (httpx.HTTPError, ValueError, KeyError):
                return False
        wait_until(ready, 30, "chromedriver to become ready", interval=0.1)

    def _call(self, method: str, path: str, body: dict | None = None):
        reply = self.http.request(method, path, json=body if body is not None else None)
        data = reply.json()
        if reply.status_code >= 400:
            raise RuntimeError(f"webdriver {method} {path}: {data.get('value')}")
        return data.get("value", data) if path != "/session" else data["value"]

    def _s(self, path: str) -> str:
        return f"/session/{self.session}{path}"

    def open(self, url: str) -> None:
        self._call("POST", self._s("/url"), {"url": url})

    def run(self, script: str, *args):
        """Run JavaScript in the page (a function body; `arguments` holds args) and return its value."""
        return self._call("POST", self._s("/execute/sync"), {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        return self._call("POST", self._s("/element"), {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css: str) -> None:
        self._call("POST", self._s(f"/element/{self.find(css)}/click"), {})

    def wait_for(self, script: str, timeout: float = 20.0, *args):
        """Poll a script until it returns something truthy (bounded: WaitTimeout after `timeout`)."""
        return wait_until(lambda: self.run(script, *args), timeout, f"the page: {script}", interval=0.1)

    def console_errors(self) -> list[str]:
        logs = self._call("POST", self._s("/se/log"), {"type": "browser"})
        return [entry["message"] for entry in logs if entry.get("level") == "SEVERE"]

    def requested_urls(self) -> list[str]:
        """Every URL the page asked the network for (from Chromium's performance log)."""
        urls = []
        for entry in self._call("POST", self._s("/se/log"), {"type": "performance"}):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def screenshot(self, path: Path) -> Path:
        import base64
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._call("GET", self._s("/screenshot"))))
        return path

    def close(self) -> None:
        try:
            self._call("DELETE", self._s(""))
        except (RuntimeError, httpx.HTTPError, ValueError):
            pass
        self.http.close()
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
