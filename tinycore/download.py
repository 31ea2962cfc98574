"""Downloads: fetch a URL into the on-disk cache and return the local path."""
from __future__ import annotations

import gzip
import hashlib
import pathlib
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request

from tinycore.helpers import cache_dir


def _sha256_of(path: pathlib.Path) -> str:
    """The hex SHA-256 digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(url: str, name: pathlib.Path | str | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = True, headers: dict[str, str] | None = None, sha256: str | None = None,
          extract: bool = False) -> pathlib.Path:
    """Download `url` into `<cache dir>/downloads[/subdir]/name` (name defaults to a hash of the URL) and return
    the path. A cached file is reused when `allow_caching`. `gunzip` decompresses the download, `sha256` checks
    its digest, `extract` unpacks a tar archive into a directory of that name. An absolute `name` path is used
    as is."""
    if name is not None and pathlib.Path(name).is_absolute():
        target = pathlib.Path(name)
    else:
        folder = cache_dir() / "downloads" / (subdir or "")
        target = folder / (str(name) if name is not None else hashlib.md5(url.encode()).hexdigest())
    if allow_caching and target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        response = urllib.request.urlopen(request, timeout=30)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise ConnectionError(f"fetch could not download {url!r}: {error}. Check the network connection (or place "
                              f"the file at {target} yourself, then fetch reuses it)") from error
    with response, tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as temporary:
        source = gzip.GzipFile(fileobj=response) if gunzip else response
        shutil.copyfileobj(source, temporary)
    downloaded = pathlib.Path(temporary.name)
    if sha256 is not None and (found := _sha256_of(downloaded)) != sha256.lower():
        downloaded.unlink()
        raise ValueError(f"fetch of {url!r}: SHA-256 mismatch, expected {sha256} but got {found}; the download is "
                         "corrupt or the expected digest is wrong")
    if extract:
        if not tarfile.is_tarfile(downloaded):
            downloaded.unlink()
            raise ValueError(f"fetch of {url!r} with extract=True: the download is not a tar archive")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(downloaded) as archive:
            archive.extractall(target, filter="data")
        downloaded.unlink()
        return target
    downloaded.replace(target)
    return target
