"""Test certificates and node keys for a Flower deployment: TLS for the SuperLink, a key pair per SuperNode.

:func:`make_credentials` writes, into a new directory (built beside it and renamed into place, so
a failure leaves nothing half-written):

* ``ca.crt`` / ``ca.key`` — a self-signed certificate authority (RSA 2048);
* ``server.pem`` / ``server.key`` — the SuperLink's certificate for ``hosts`` (IP addresses and DNS
  names in its subjectAltName), signed by that CA; SuperNodes and ``flwr`` trust ``ca.crt``;
* ``party_<k>`` / ``party_<k>.pub`` — party ``k``'s SuperNode authentication key pair (ECDSA
  P-384; private key in OpenSSH format, which ``flower-supernode --auth-supernode-private-key``
  reads; public key in OpenSSH format, which ``flwr supernode register`` takes).

They are for tests and trials on one machine: a real federation uses its own CA, and every party
makes its own key pair and hands only the public key to the SuperLink's operator.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from portfed.validation import check_int


@dataclass(frozen=True)
class Credentials:
    """The files of :func:`make_credentials` in ``directory``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_certificate(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    def node_key(self, party: int) -> Path:
        return self.directory / f"party_{party}"

    def node_public_key(self, party: int) -> Path:
        return self.directory / f"party_{party}.pub"

    def missing(self, parties: int) -> list[Path]:
        """The files of ``parties`` parties that are not there."""
        files = [self.ca, self.server_certificate, self.server_key]
        files += [f for k in range(parties) for f in (self.node_key(k), self.node_public_key(k))]
        return [f for f in files if not f.is_file()]


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _subject_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def make_credentials(directory: str | Path, parties: int, hosts: Sequence[str] = ("127.0.0.1", "localhost"),
                     days: int = 30) -> Credentials:
    """A CA, the SuperLink's certificate for ``hosts`` and ``parties`` node key pairs, valid ``days`` days
    (module docstring).  ``FileExistsError`` when ``directory`` exists (nothing is overwritten)."""
    parties = check_int(parties, "parties", minimum=1)
    days = check_int(days, "days", minimum=1)
    if not hosts:
        raise ValueError("hosts must name at least one IP address or DNS name of the SuperLink")
    target = Path(directory)
    if target.exists():
        raise FileExistsError(f"{target} exists; credentials are never overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    valid = {"not_valid_before": now - dt.timedelta(minutes=5), "not_valid_after": now + dt.timedelta(days=days)}
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portfed test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(valid["not_valid_before"])
          .not_valid_after(valid["not_valid_after"])
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
              .add_extension(x509.SubjectAlternativeName(_subject_names(hosts)), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        built = Credentials(staging)
        built.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        _write_private(staging / "ca.key", _pem(ca_key))
        built.server_certificate.write_bytes(server.public_bytes(serialization.Encoding.PEM))
        _write_private(built.server_key, _pem(server_key))
        for k in range(parties):
            key = ec.generate_private_key(ec.SECP384R1())
            _write_private(built.node_key(k), key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.OpenSSH,
                                                                serialization.NoEncryption()))
            built.node_public_key(k).write_bytes(key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n")
        staging.chmod(0o700)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Credentials(target)
