// Modular exponentiation on big-endian byte strings, through OpenSSL's constant-time BIGNUM code:
// the one operation finite-field Diffie-Hellman needs and swift-crypto does not offer (the Secret
// Service's dh-ietf1024-sha256-aes128-cbc-pkcs7 session). Only the SecretService target uses it.
#ifndef TPMKEYCHAIN_CMODULAREXPONENTIATION_H
#define TPMKEYCHAIN_CMODULAREXPONENTIATION_H

#include <stddef.h>
#include <stdint.h>

/// result = base ^ exponent mod modulus, written big-endian and left-padded with zeros to
/// modulus_size bytes. The exponent is treated as secret (BN_FLG_CONSTTIME).
/// Returns 1 on success, 0 on failure (an even or zero modulus, no memory).
int tpmkeychain_mod_exp(const uint8_t *base, size_t base_size, const uint8_t *exponent, size_t exponent_size,
                        const uint8_t *modulus, size_t modulus_size, uint8_t *result);

#endif
