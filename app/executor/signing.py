"""Signing HTTP deliveries (``Kairos-Signature``): the format and the receivers' verifier are defined
once, in the tenant SDK (``kairos_sdk.signature``), so the server signs exactly what tenants check."""

from kairos_sdk.signature import sign

__all__ = ["sign"]
