"""A local Microsoft Entra ID for the local Service Bus: a token issuer and the checks of its tokens.

``keys`` holds the issuer's signing key and what a namespace trusts; ``directory`` the identities and their
Service Bus data roles (a small TOML file); ``tokens`` mints and verifies RS256 access tokens; ``grants``
turns a CBS or HTTP token (SAS or JWT) into the rights it gives; ``issuer`` is the HTTP app that answers
``ManagedIdentityCredential`` (App Service protocol) and the OAuth2 client-credentials flow of
``ClientSecretCredential``/``CertificateCredential``/``WorkloadIdentityCredential``.
"""
