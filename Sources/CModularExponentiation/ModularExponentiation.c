#include "CModularExponentiation.h"

#include <openssl/bn.h>

int tpmkeychain_mod_exp(const uint8_t *base, size_t base_size, const uint8_t *exponent, size_t exponent_size,
                        const uint8_t *modulus, size_t modulus_size, uint8_t *result) {
    int ok = 0;
    BN_CTX *context = BN_CTX_new();
    BIGNUM *b = BN_bin2bn(base, (int)base_size, NULL);
    BIGNUM *e = BN_bin2bn(exponent, (int)exponent_size, NULL);
    BIGNUM *m = BN_bin2bn(modulus, (int)modulus_size, NULL);
    BIGNUM *r = BN_new();
    if (context == NULL || b == NULL || e == NULL || m == NULL || r == NULL) goto done;
    BN_set_flags(e, BN_FLG_CONSTTIME);
    if (BN_mod_exp_mont_consttime(r, b, e, m, context, NULL) != 1) goto done;
    if (BN_bn2binpad(r, result, (int)modulus_size) != (int)modulus_size) goto done;
    ok = 1;
done:
    BN_clear_free(e);
    BN_free(b);
    BN_free(m);
    BN_clear_free(r);
    BN_CTX_free(context);
    return ok;
}
