// Loaded first into every interop suite (node --import): the clients under test may look up only
// loopback names. A lookup of any other name fails at once without a query, so a client that
// builds a URL the test did not give (an SDK ignoring E2B_SANDBOX_URL) fails loudly instead of
// asking a real DNS server (the project's network rule: tests talk to loopback only).
import dns from 'node:dns';

const allowed = new Set(['localhost', '127.0.0.1', '::1']);
const refuse = (host) => Object.assign(new Error(`no DNS in tests: ${host}`), { code: 'ENOTFOUND' });
const lookup = dns.lookup;
const lookupPromise = dns.promises.lookup;

dns.lookup = function (host, ...rest) {
    if (!allowed.has(host)) {
        process.nextTick(rest[rest.length - 1], refuse(host));
        return {};
    }
    return lookup.call(this, host, ...rest);
};
dns.promises.lookup = async (host, ...rest) => {
    if (!allowed.has(host)) throw refuse(host);
    return lookupPromise(host, ...rest);
};
