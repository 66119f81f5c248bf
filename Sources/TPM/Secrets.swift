// SecretBytes and SecretMemory are the Secrets target's, below this layer; every program that
// imports TPM for a sealed key also holds its secrets in them.
@_exported public import Secrets
