/* Internal: the harness's deterministic random numbers (xoshiro256** seeded
 * through splitmix64), shared by the synthetic cases and the fuzzer's draws so a
 * seed means the same stream in both. */
#ifndef MLAJIT_HARNESS_RNG_H
#define MLAJIT_HARNESS_RNG_H
#include <stdint.h>
#include <string.h>

typedef struct mlajit_rng {
    uint64_t s[4];
    double spare_normal; /* the second value of a Box-Muller pair */
    int has_spare;
} mlajit_rng;

static inline uint64_t mlajit_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void mlajit_rng_seed(mlajit_rng *r, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < 4; k++)
        r->s[k] = mlajit_splitmix64(&seed);
}

static inline uint64_t mlajit_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t mlajit_rng_next(mlajit_rng *r) /* xoshiro256** */
{
    uint64_t *s = r->s;
    const uint64_t result = mlajit_rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = mlajit_rotl64(s[3], 45);
    return result;
}

#endif
