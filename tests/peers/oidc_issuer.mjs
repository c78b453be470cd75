// A real OpenID provider for the OAuth tests: `oidc-provider` (certified), on loopback.
//
// Two issuers share one set of signing keys: the main one, and `other` (another issuer name,
// the same keys: its tokens verify, and only `iss` tells them apart). Both issue JWT access
// tokens for whatever resource indicator a client names (audience = the resource), by the
// client-credentials grant. Clients: alice and bob (JWT tokens), opaque (opaque tokens, to be
// introspected), gateway (may introspect).
//
// A control server drives what a test cannot ask a provider for:
//   POST /rotate       a new RSA key signs from now on; the old ones stay published
//   POST /retire       only the newest key stays published
//   POST /clock?offset=S   the providers' clock runs S seconds off (tokens expired or not yet valid)
//   GET  /stats        {"jwks": <key-set requests served>}
//
// Prints one JSON line when ready: {"issuer", "other", "control"}. Exits when stdin closes.

import http from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const SECRET = 'a-client-secret-of-some-length-0123456789';
const SCOPES = 'mcp:tools mcp:admin';
const clients = ['alice', 'bob', 'opaque', 'gateway'].map((id) => ({
  client_id: id,
  client_secret: `${id}-${SECRET}`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  scope: SCOPES,
}));

const realNow = Date.now;
let offsetMs = 0;
Date.now = () => realNow() + offsetMs;

let serial = 0;
function newKey() {
  serial += 1;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: `key-${serial}-${realNow()}`, use: 'sig', alg: 'RS256' };
}

let keys = [newKey()];
let jwksServed = 0;

function build(issuer) {
  const provider = new Provider(issuer, {
    clients,
    jwks: { keys },
    scopes: ['openid', ...SCOPES.split(' ')],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: SCOPES,
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: client.clientId === 'opaque' ? 'opaque' : 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
  });
  return provider.callback();
}

async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${server.address().port}`;
}

const handlers = {};
function issuerServer(name) {
  return http.createServer((req, res) => {
    if (req.url.startsWith('/jwks')) jwksServed += 1;
    handlers[name](req, res);
  });
}

const mainServer = issuerServer('main');
const otherServer = issuerServer('other');
const issuer = await listen(mainServer);
const other = await listen(otherServer);
function rebuild() {
  handlers.main = build(issuer);
  handlers.other = build(other);
}
rebuild();

const control = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://control');
  let body = { ok: true };
  if (req.method === 'POST' && url.pathname === '/rotate') {
    keys = [newKey(), ...keys];
    rebuild();
    body = { kid: keys[0].kid };
  } else if (req.method === 'POST' && url.pathname === '/retire') {
    keys = [keys[0]];
    rebuild();
  } else if (req.method === 'POST' && url.pathname === '/clock') {
    offsetMs = Number(url.searchParams.get('offset') || '0') * 1000;
  } else if (req.method === 'GET' && url.pathname === '/stats') {
    body = { jwks: jwksServed };
  } else {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
});
const controlUrl = await listen(control);

process.stdout.write(`${JSON.stringify({ issuer, other, control: controlUrl, secret: SECRET })}\n`);
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
