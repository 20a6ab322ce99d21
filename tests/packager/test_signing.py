"""Signed packages: keygen, signing at package time, and the loader accepting only packages signed by a trusted
key (the user's own, ``--trust``, ``DRIVEPACK_TRUST``) or under ``--allow-unsigned``, refusing before anything
is compiled."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from packager.build import BuildOptions, build_package
from packager.cli import main
from packager.container import (
    FLAG_LITTLE_ENDIAN,
    FLAG_SIGNED,
    HEADER,
    HEADER_SIZE,
    SIGNATURE_SIZE,
    Section,
    open_container,
    write_container,
)
from packager.errors import PackageError, SignatureError
from packager.package import load_package
from packager.signing import (
    SigningKey,
    generate_key,
    key_fingerprint,
    load_public_key,
    load_signing_key,
    public_path,
    user_key_path,
    user_signing_key,
)
from packager.synthetic import tiny_model


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test starts with no key of its own and no DRIVEPACK_TRUST: only what it sets up is trusted."""
    monkeypatch.setenv("DRIVEPACK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("DRIVEPACK_TRUST", raising=False)
    return tmp_path / "config"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SigningKey]:
    d = tmp_path_factory.mktemp("keys")
    return {name: generate_key(d / f"{name}.pem") for name in ("A", "B")}


@pytest.fixture(scope="module")
def signed_by_a(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, SigningKey]) -> Path:
    d = tmp_path_factory.mktemp("signed")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    return build_package(d / "tiny.onnx", "pc-cpu", d / "a.dpk", BuildOptions(golden_sets=1, sign=keys["A"].path)).path


def rewrite(src: Path, dst: Path, key: SigningKey | None,
            section_edit: Callable[[str, bytes], bytes] | None = None) -> Path:
    """``src`` written again through the writer (every checksum valid), signed by ``key`` (None: unsigned)."""
    c = open_container(src)
    manifest = {k: v for k, v in c.manifest.items() if k not in ("sections", "section_alignment")}
    sections = []
    for e in c.manifest["sections"]:
        data = bytes(c.view(e["name"]))
        sections.append(Section(e["name"], e["kind"], section_edit(e["name"], data) if section_edit else data,
                                {k: v for k, v in e.items() if k not in ("name", "kind", "offset", "size", "sha256")}))
    write_container(dst, manifest, sections, c.manifest["section_alignment"], sign=key.sign if key else None)
    return dst


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- keys ----------------------------------------------------------------------------------------------------

def test_keygen_writes_a_private_key_0600_and_its_public_key(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "k" / "release.pem"
    code, out, _ = cli(capsys, "keygen", "-o", str(path))
    assert code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS8 PEM
    pub = public_path(path)
    assert pub.name == "release.pem.pub" and pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    raw = load_public_key(pub)
    assert load_signing_key(path).public_raw == raw and len(raw) == 32
    assert f"fingerprint {key_fingerprint(raw)}" in out
    code, _, err = cli(capsys, "keygen", "-o", str(path))  # never overwrites a key
    assert code == 2 and "a key is never overwritten" in err and load_signing_key(path).public_raw == raw


def test_keygen_without_o_makes_the_users_own_key(own_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "keygen")
    assert code == 0 and user_key_path() == own_config / "signing-key.pem"
    assert stat.S_IMODE(user_key_path().stat().st_mode) == 0o600
    assert user_signing_key().fingerprint in out


def test_raw_key_files_and_bad_key_files(tmp_path: Path, keys: dict[str, SigningKey]) -> None:
    from cryptography.hazmat.primitives import serialization

    seed = keys["A"].private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                           serialization.NoEncryption())
    (tmp_path / "a.raw").write_bytes(seed)
    (tmp_path / "a.pub.raw").write_bytes(keys["A"].public_raw)
    assert load_signing_key(tmp_path / "a.raw").fingerprint == keys["A"].fingerprint
    assert load_public_key(tmp_path / "a.pub.raw") == keys["A"].public_raw
    (tmp_path / "junk").write_bytes(b"not a key")
    with pytest.raises(SignatureError, match=r"junk: expected an Ed25519 SubjectPublicKeyInfo PEM or raw 32-byte"):
        load_public_key(tmp_path / "junk")
    with pytest.raises(SignatureError, match=r"junk: expected an unencrypted Ed25519 PKCS8 PEM"):
        load_signing_key(tmp_path / "junk")
    with pytest.raises(SignatureError, match="expected a readable key file"):
        load_signing_key(tmp_path / "missing.pem")


def test_the_users_own_key_is_made_on_first_use_and_announced_once(own_config: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert not own_config.exists()
    first = user_signing_key()
    err = capsys.readouterr().err
    assert f"created your signing key {own_config / 'signing-key.pem'}" in err and first.fingerprint in err
    assert stat.S_IMODE(own_config.stat().st_mode) == 0o700
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert load_public_key(public_path(first.path)) == first.public_raw
    assert user_signing_key().fingerprint == first.fingerprint
    assert capsys.readouterr().err == ""  # printed once


def test_a_package_built_without_sign_is_signed_with_the_users_own_key(tmp_path: Path, own_config: Path) -> None:
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    result = build_package(tmp_path / "tiny.onnx", "pc-cpu", tmp_path / "own.dpk", BuildOptions(golden_sets=1))
    own = user_signing_key()
    assert result.package.signature is not None and result.package.signature.fingerprint == own.fingerprint
    pkg = load_package(result.path)  # trusted by default: it is the user's own key
    assert pkg.signature is not None and pkg.signature.trusted_by == f"your own key {own.path}"
    raw = result.path.read_bytes()
    assert HEADER.unpack_from(raw, 0)[2] == FLAG_LITTLE_ENDIAN | FLAG_SIGNED
    assert raw[-SIGNATURE_SIZE:].startswith(b"DPKSIG\r\n") and own.public_raw in raw[-SIGNATURE_SIZE:]


# --- trust -----------------------------------------------------------------------------------------------------

def test_signed_by_a_is_refused_when_only_b_is_trusted(signed_by_a: Path, keys: dict[str, SigningKey],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    a, b = keys["A"], keys["B"]
    with pytest.raises(SignatureError, match=rf"got a package signed by key {a.fingerprint}"):
        load_package(signed_by_a, trust=[public_path(b.path)])
    for command in ("verify", "replay"):
        code, out, err = cli(capsys, command, str(signed_by_a), "--trust", str(public_path(b.path)))
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and a.fingerprint in err and "signature: expected a key trusted here" in err


def test_trust_a_by_option_fingerprint_or_environment(signed_by_a: Path, keys: dict[str, SigningKey],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    a_pub, b_pub = str(public_path(keys["A"].path)), str(public_path(keys["B"].path))
    code, out, _ = cli(capsys, "verify", str(signed_by_a), "--trust", b_pub, "--trust", a_pub)
    assert code == 0 and "verify ok" in out
    code, out, _ = cli(capsys, "replay", str(signed_by_a), "--trust", a_pub, "--iters", "2", "--warmup", "0")
    assert code == 0 and "2 iters" in out
    assert load_package(signed_by_a, trust=[keys["A"].fingerprint]).signature.trusted_by.startswith("--trust")
    monkeypatch.setenv("DRIVEPACK_TRUST", os.pathsep.join([b_pub, a_pub]))
    code, out, _ = cli(capsys, "verify", str(signed_by_a))
    assert code == 0 and "verify ok" in out
    assert load_package(signed_by_a).signature.trusted_by == f"DRIVEPACK_TRUST {a_pub}"
    monkeypatch.setenv("DRIVEPACK_TRUST", str(Path(a_pub).with_name("missing.pub")))  # never silently skipped
    with pytest.raises(SignatureError, match="missing.pub: expected a readable key file"):
        load_package(signed_by_a)


def test_unsigned_is_refused_unless_allow_unsigned(signed_by_a: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    unsigned = rewrite(signed_by_a, tmp_path / "unsigned.dpk", None)
    assert HEADER.unpack_from(unsigned.read_bytes(), 0)[2] == FLAG_LITTLE_ENDIAN
    with pytest.raises(SignatureError, match="got an unsigned package"):
        load_package(unsigned)
    code, _, err = cli(capsys, "verify", str(unsigned))
    assert code == 2 and "unsigned package" in err
    code, out, _ = cli(capsys, "verify", str(unsigned), "--allow-unsigned")
    assert code == 0 and "verify ok" in out
    assert load_package(unsigned, allow_unsigned=True).signature.fingerprint is None
    code, out, _ = cli(capsys, "verify", str(signed_by_a), "--allow-unsigned")  # by a key not trusted here
    assert code == 0 and "verify ok" in out


def _flip(src: Path, dst: Path, offset: int) -> Path:
    raw = bytearray(src.read_bytes())
    raw[offset] ^= 0x01
    dst.write_bytes(bytes(raw))
    return dst


@pytest.mark.parametrize("where, offset", [("signature", -SIGNATURE_SIZE + 48), ("signature end", -17),
                                           ("public key", -SIGNATURE_SIZE + 16)])
def test_a_tampered_signature_is_refused_even_with_allow_unsigned(signed_by_a: Path, tmp_path: Path,
                                                                  keys: dict[str, SigningKey], where: str,
                                                                  offset: int) -> None:
    bad = _flip(signed_by_a, tmp_path / "bad.dpk", len(signed_by_a.read_bytes()) + offset)
    for kwargs in ({"trust": [keys["A"].fingerprint]}, {"allow_unsigned": True}):
        with pytest.raises(SignatureError, match="got one that does not verify"):
            load_package(bad, **kwargs)


def test_trailer_padding_and_magic_are_checked(signed_by_a: Path, tmp_path: Path) -> None:
    size = len(signed_by_a.read_bytes())
    for offset in (size - 1, size - SIGNATURE_SIZE):
        with pytest.raises(PackageError, match="signature trailer expected magic"):
            load_package(_flip(signed_by_a, tmp_path / "t.dpk", offset), allow_unsigned=True)


def test_an_edited_manifest_checksummed_again_keeps_no_valid_signature(signed_by_a: Path, tmp_path: Path,
                                                                      keys: dict[str, SigningKey]) -> None:
    raw = bytearray(signed_by_a.read_bytes())
    m_size = HEADER.unpack_from(raw, 0)[4]
    body = bytes(raw[HEADER_SIZE:HEADER_SIZE + m_size])
    edited = body.replace(b'"name":"pc-cpu"', b'"name":"pc-cpX"', 1)
    assert edited != body and len(edited) == len(body)
    raw[HEADER_SIZE:HEADER_SIZE + m_size] = edited
    raw[32:64] = hashlib.sha256(edited).digest()  # every checksum is right again; the signature is the old one
    bad = tmp_path / "edited.dpk"
    bad.write_bytes(bytes(raw))
    assert open_container(bad).manifest["vehicle"]["name"] == "pc-cpX"
    with pytest.raises(SignatureError, match=rf"valid Ed25519 signature by key {keys['A'].fingerprint}, got one that "
                                             "does not verify"):
        load_package(bad, trust=[keys["A"].fingerprint])


def test_the_refusal_comes_before_anything_is_compiled(signed_by_a: Path, tmp_path: Path,
                                                       keys: dict[str, SigningKey],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A kernel source that cannot compile, signed by B: with only A trusted the error is the signature's; with
    B trusted too, loading and replaying get as far as that source and fail on it (so it was never reached)."""
    def poison(name: str, data: bytes) -> bytes:
        return b"#error poisoned kernel\n" + data if name == "tiny/kernel/0" else data

    crafted = rewrite(signed_by_a, tmp_path / "p.dpk", keys["B"], poison)
    a_pub, b_pub = str(public_path(keys["A"].path)), str(public_path(keys["B"].path))
    code, _, err = cli(capsys, "verify", str(crafted), "--trust", a_pub)
    assert code == 2 and f"signed by key {keys['B'].fingerprint}" in err and "poisoned" not in err
    code, _, err = cli(capsys, "verify", str(crafted), "--trust", a_pub, "--trust", b_pub)
    assert code == 2 and "signature" not in err and "poisoned kernel" in err


@pytest.mark.parametrize("version", [1, 2])
def test_format_versions_1_and_2_are_refused_signed_or_not(signed_by_a: Path, tmp_path: Path, version: int) -> None:
    """Before version 3 a package held one model and no entries: refused by version, before the signature, the
    manifest (whatever its format_version says) or anything else is looked at."""
    for name, src in (("signed", signed_by_a), ("unsigned", rewrite(signed_by_a, tmp_path / "u.dpk", None))):
        raw = bytearray(src.read_bytes())
        m_size = HEADER.unpack_from(raw, 0)[4]
        body = bytes(raw[HEADER_SIZE:HEADER_SIZE + m_size]).replace(b'"format_version":3',
                                                                     f'"format_version":{version}'.encode())
        raw[HEADER_SIZE:HEADER_SIZE + m_size] = body
        raw[32:64] = hashlib.sha256(body).digest()
        struct.pack_into("<I", raw, 8, version)
        (tmp_path / f"{name}.dpk").write_bytes(bytes(raw))
        for allow in (False, True):
            with pytest.raises(PackageError, match=rf"format version expected one of \[3\] \(this drivepack reads "
                                                   rf"format version 3\), got {version}$") as e:
                load_package(tmp_path / f"{name}.dpk", allow_unsigned=allow)
            assert not isinstance(e.value, SignatureError)


def test_a_stripped_signed_flag_is_refused(signed_by_a: Path, tmp_path: Path) -> None:
    raw = bytearray(signed_by_a.read_bytes())
    struct.pack_into("<I", raw, 12, FLAG_LITTLE_ENDIAN)  # claims unsigned: the trailer is then trailing bytes
    (tmp_path / "strip.dpk").write_bytes(bytes(raw))
    with pytest.raises(PackageError, match=rf"\({SIGNATURE_SIZE} trailing bytes\)"):
        load_package(tmp_path / "strip.dpk", allow_unsigned=True)


# --- inspect ---------------------------------------------------------------------------------------------------

def test_inspect_shows_the_signer_and_whether_it_is_trusted(signed_by_a: Path, tmp_path: Path,
                                                            keys: dict[str, SigningKey],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    a = keys["A"]
    code, out, _ = cli(capsys, "inspect", str(signed_by_a))  # runs nothing, so it shows untrusted packages too
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("signature: "))
    assert f"Ed25519 by {a.fingerprint[:16]} (fingerprint {a.fingerprint}), NOT trusted here" in line
    code, out, _ = cli(capsys, "inspect", str(signed_by_a), "--trust", str(public_path(a.path)), "--json")
    assert code == 0
    assert json.loads(out)["signature"] == {"signed": True, "fingerprint": a.fingerprint, "trusted": True,
                                            "trusted_by": f"--trust {public_path(a.path)}"}
    code, out, _ = cli(capsys, "inspect", str(rewrite(signed_by_a, tmp_path / "u.dpk", None)))
    assert code == 0 and "signature: none (unsigned" in out
