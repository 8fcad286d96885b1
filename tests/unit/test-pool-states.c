/* Unit tests of the warm pool's slot state machine (src/pool/pool.c): the transition table that
 * pool_slot_set_state(), the one writer of a slot's state, asserts. Every pair of states is
 * checked against the diagram of pool.h. */
#include "pool/pool-internal.h"
#include "tap.h"

enum {
    I = POOL_SLOT__INVALID
};

static const struct {
    int from, to;
} allowed[] = {
    {I, POOL_SLOT_CREATING},
    {I, POOL_SLOT_ADOPTING},
    {POOL_SLOT_CREATING, POOL_SLOT_STARTING},
    {POOL_SLOT_STARTING, POOL_SLOT_CONNECTING},
    {POOL_SLOT_ADOPTING, POOL_SLOT_CONNECTING},
    {POOL_SLOT_CONNECTING, POOL_SLOT_READY},
    {POOL_SLOT_CONNECTING, POOL_SLOT_BOUND}, /* an adopted container that serves a session */
    {POOL_SLOT_READY, POOL_SLOT_BOUND},
};

static bool
expected(int from, int to)
{
    if (to == POOL_SLOT_REMOVING) {
        return from != I; /* from anywhere, again on a retry */
    }
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        if (allowed[i].from == from && allowed[i].to == to) {
            return true;
        }
    }
    return false;
}

TEST(transitions)
{
    static const int states[] = {I,
                                 POOL_SLOT_CREATING,
                                 POOL_SLOT_STARTING,
                                 POOL_SLOT_ADOPTING,
                                 POOL_SLOT_CONNECTING,
                                 POOL_SLOT_READY,
                                 POOL_SLOT_BOUND,
                                 POOL_SLOT_REMOVING,
                                 POOL_SLOT__COUNT};

    for (size_t f = 0; f < sizeof(states) / sizeof(states[0]); f++) {
        for (size_t t = 0; t < sizeof(states) / sizeof(states[0]); t++) {
            bool ok = pool_slot_transition_ok((enum pool_slot_state)states[f],
                                              (enum pool_slot_state)states[t]);

            TAP_CHECK(ok == expected(states[f], states[t]), "%d -> %d: %s", states[f], states[t],
                      ok ? "allowed" : "refused");
        }
    }
    /* A bound slot never goes back to the pool, a removal never ends anywhere but in a free. */
    ASSERT_TRUE(!pool_slot_transition_ok(POOL_SLOT_BOUND, POOL_SLOT_READY));
    ASSERT_TRUE(!pool_slot_transition_ok(POOL_SLOT_REMOVING, POOL_SLOT_READY));
    ASSERT_TRUE(!pool_slot_transition_ok(POOL_SLOT_ADOPTING, POOL_SLOT_READY));
    ASSERT_TRUE(!pool_slot_transition_ok(POOL_SLOT_READY, POOL_SLOT__INVALID));
}

int
main(void)
{
    RUN(transitions);
    return tap_done();
}
