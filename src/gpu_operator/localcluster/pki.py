"""Certificates and keys for the local control plane, made with ``cryptography``.

One self-signed CA issues a serving certificate (shared by kube-apiserver, controller-manager and scheduler,
valid for ``localhost``, ``127.0.0.1`` and the in-cluster ``kubernetes.default.svc`` names) and client
certificates whose subject maps to a Kubernetes user: the common name is the user name and each
organization a group (``O=system:masters`` makes the admin). A separate key pair signs service-account
tokens. All keys are ECDSA P-256: fast to generate, and accepted by every component.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = dt.timedelta(days=365)
#: Backdating absorbs small clock differences between the issuer and the verifier.
BACKDATE = dt.timedelta(minutes=5)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CertAndKey:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class SigningKey:
    """The service-account token signing key (private) and its verification key (public), both PEM."""

    private_pem: bytes
    public_pem: bytes


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that can issue serving and client certificates."""

    cert_pem: bytes
    key_pem: bytes
    validity: dt.timedelta = DEFAULT_VALIDITY

    @classmethod
    def create(
        cls, *, common_name: str = "gpu-operator-local-ca", validity: dt.timedelta = DEFAULT_VALIDITY
    ) -> CertificateAuthority:
        """A new CA with a fresh key."""
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        not_before, not_after = _window(validity=validity)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=_key_pem(key),
            validity=validity,
        )

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def _private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("the CA key is not an ECDSA key")
        return key

    def issue_serving(self, *, common_name: str, dns_names: Sequence[str], ip_addresses: Sequence[str]) -> CertAndKey:
        """A TLS server certificate for the given DNS names and IP addresses."""
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        return self._issue(
            common_name=common_name,
            organizations=(),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=sans,
        )

    def issue_client(self, *, common_name: str, organizations: Iterable[str] = ()) -> CertAndKey:
        """A TLS client certificate: Kubernetes user ``common_name`` in groups ``organizations``."""
        return self._issue(
            common_name=common_name,
            organizations=tuple(organizations),
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            sans=[],
        )

    def _issue(
        self,
        *,
        common_name: str,
        organizations: tuple[str, ...],
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
    ) -> CertAndKey:
        key = _new_key()
        ca_key = self._private_key()
        ca_cert = self.certificate
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        not_before, not_after = _window(validity=self.validity)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return CertAndKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def new_signing_key() -> SigningKey:
    """A fresh key pair for signing service-account tokens."""
    key = _new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return SigningKey(private_pem=_key_pem(key), public_pem=public)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _window(*, validity: dt.timedelta) -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC)
    return now - BACKDATE, now + validity


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
