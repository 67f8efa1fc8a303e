"""Certificates of the local control plane: chain, names, usages and the user/group mapping."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_operator.localcluster.pki import CertificateAuthority, new_signing_key


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create(common_name="test-ca")


def test_ca_is_self_signed_ca(ca: CertificateAuthority) -> None:
    cert = ca.certificate
    assert cert.subject == cert.issuer
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    cert.verify_directly_issued_by(cert)


def test_serving_cert_names_and_usage(ca: CertificateAuthority) -> None:
    issued = ca.issue_serving(common_name="kube-apiserver", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    cert = issued.certificate
    cert.verify_directly_issued_by(ca.certificate)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_client_cert_maps_user_and_groups(ca: CertificateAuthority) -> None:
    issued = ca.issue_client(common_name="kubernetes-admin", organizations=["system:masters", "extra"])
    cert = issued.certificate
    cert.verify_directly_issued_by(ca.certificate)
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["kubernetes-admin"]
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "extra",
    ]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(issued.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    public = cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert key.public_key().public_numbers() == public.public_numbers()


def test_validity_window_is_backdated(ca: CertificateAuthority) -> None:
    cert = ca.issue_client(common_name="u").certificate
    assert cert.not_valid_before_utc < cert.not_valid_after_utc
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days >= 365


def test_signing_key_pair_matches() -> None:
    pair = new_signing_key()
    private = serialization.load_pem_private_key(pair.private_pem, password=None)
    public = serialization.load_pem_public_key(pair.public_pem)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()
