// A real OpenID provider for the OAuth tests: `oidc-provider` (certified), on loopback.
//
// Two issuers share one set of signing keys: the main one, and `other` (another issuer name,
// the same keys: its tokens verify, and only `iss` tells them apart). Both issue JWT access
// tokens for whatever resource indicator a client names (audience = the resource), by the
// client-credentials grant. Clients: alice and bob (JWT tokens), opaque (opaque tokens, to be
// introspected), gateway (may introspect, and exchange tokens), shortlived (its tokens live
// SHORT_TTL seconds).
//
// Token exchange (RFC 8693) is a grant type registered here: a client names a subject token
// (an access token this issuer signed, unexpired) and a resource (or audience), and gets a JWT
// for that resource on behalf of the subject: `sub` is the subject token's, `aud` the resource,
// `act.sub` and `client_id` the exchanging client.
//
// Access tokens carry a `groups` claim: alice is in `ops`, bob in `support` (the tool policy's tests).
//
// A control server drives what a test cannot ask a provider for:
//   POST /rotate       a new RSA key signs from now on; the old ones stay published
//   POST /retire       only the newest key stays published
//   POST /clock?offset=S   the providers' clock runs S seconds off (tokens expired or not yet valid)
//   GET  /stats        {"jwks": <key-set requests served>, "tokens": {"<grant>": <tokens issued>}}
//
// Prints one JSON line when ready: {"issuer", "other", "control"}. Exits when stdin closes.

import http from 'node:http';
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomUUID, sign, verify } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const SECRET = 'a-client-secret-of-some-length-0123456789';
const SCOPES = 'mcp:tools mcp:admin';
const SHORT_TTL = 3;
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
const clients = ['alice', 'bob', 'opaque', 'gateway', 'shortlived'].map((id) => ({
  client_id: id,
  client_secret: `${id}-${SECRET}`,
  grant_types: ['gateway', 'shortlived'].includes(id) ? ['client_credentials', TOKEN_EXCHANGE] : ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  scope: SCOPES,
}));

const GROUPS = { alice: ['ops'], bob: ['support'] };

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
const issued = {};

function b64(value) {
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
}

// A JWT this issuer signed (any published key), unexpired; its claims, or an invalid_grant.
function verified(token, issuer) {
  const [head, body, signature] = String(token).split('.');
  let header;
  let claims;
  try {
    header = JSON.parse(Buffer.from(head, 'base64url'));
    claims = JSON.parse(Buffer.from(body, 'base64url'));
  } catch {
    throw new errors.InvalidGrant('subject_token is not a JWT');
  }
  const key = keys.find((k) => k.kid === header.kid);
  const good = key && header.alg === 'RS256' && verify(
    'RSA-SHA256', Buffer.from(`${head}.${body}`), createPublicKey({ key, format: 'jwk' }), Buffer.from(signature, 'base64url'),
  );
  if (!good) throw new errors.InvalidGrant('subject_token is not signed by this issuer');
  if (claims.iss !== issuer) throw new errors.InvalidGrant('subject_token is from another issuer');
  if (typeof claims.exp !== 'number' || claims.exp <= Date.now() / 1000) throw new errors.InvalidGrant('subject_token has expired');
  return claims;
}

function signed(claims) {
  const key = keys[0];
  const head = b64({ alg: 'RS256', typ: 'at+jwt', kid: key.kid });
  const body = b64(claims);
  const signature = sign('RSA-SHA256', Buffer.from(`${head}.${body}`), createPrivateKey({ key, format: 'jwk' }));
  return `${head}.${body}.${signature.toString('base64url')}`;
}

function tokenExchange(issuer) {
  return async function tokenExchangeHandler(ctx) {
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== ACCESS_TOKEN) {
      throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN}`);
    }
    const subject = verified(params.subject_token, issuer);
    const resource = params.resource || params.audience;
    if (!resource) throw new errors.InvalidTarget('name the resource or the audience of the token');
    const ttl = client.clientId === 'shortlived' ? SHORT_TTL : 600;
    const now = Math.floor(Date.now() / 1000);
    const scope = params.scope || subject.scope;
    const claims = {
      iss: issuer, sub: subject.sub, aud: resource, client_id: client.clientId, act: { sub: client.clientId },
      scope, iat: now, exp: now + ttl, jti: randomUUID(),
    };
    issued[TOKEN_EXCHANGE] = (issued[TOKEN_EXCHANGE] || 0) + 1;
    ctx.body = { access_token: signed(claims), issued_token_type: ACCESS_TOKEN, token_type: 'Bearer', expires_in: ttl, scope };
  };
}

function build(issuer) {
  const provider = new Provider(issuer, {
    clients,
    jwks: { keys },
    scopes: ['openid', ...SCOPES.split(' ')],
    extraTokenClaims: (ctx, token) => ({ groups: GROUPS[token.clientId] || [] }),
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
          accessTokenTTL: client.clientId === 'shortlived' ? SHORT_TTL : 600,
          accessTokenFormat: client.clientId === 'opaque' ? 'opaque' : 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
  });
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    tokenExchange(issuer),
    ['subject_token', 'subject_token_type', 'requested_token_type', 'resource', 'audience', 'scope'],
  );
  provider.on('grant.success', (ctx) => {
    const grant = ctx.oidc.params.grant_type;
    if (grant !== TOKEN_EXCHANGE) issued[grant] = (issued[grant] || 0) + 1;
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
    body = { jwks: jwksServed, tokens: issued };
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
