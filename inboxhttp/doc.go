// Package inboxhttp is a net/http middleware that makes POST and PATCH handlers and
// webhook receivers idempotent on an inbox: a request with a key the route has seen
// before gets the first response again, byte for byte, and the handler does not run.
//
// The first request with a key runs the handler inside the inbox transaction, reachable
// with inbox.TxFromContext from r.Context(). The middleware buffers the response
// (status, headers, body), stores it with the key in the same transaction
// (inbox.ProcessResult), commits, and only then sends it: always in a transaction of its
// own, never one the request context carries. Trailers are stored and replayed with
// the headers. If the commit fails the client gets a 503 with Retry-After and nothing is
// stored, so its retry runs the handler again; a failure no retry can cure
// (inbox.Permanent: the request crashed the server MaxAttempts times, its response is
// larger than the inbox stores) gets a 500 without Retry-After, and a problem type that
// says so (ProblemPermanent, ProblemTooManyAttempts; docs/errors.md). A handler that
// panics rolls back, and net/http then recovers the panic: not a crash, for
// inbox.Config.MaxAttempts. A retry with the same key and the same request gets the
// stored response with the header Idempotent-Replayed: true. The same key with a
// different request (method, path, query or body) gets 422; a key still in flight waits
// for the first request (bounded) or gets 409 (see Config.InFlight), observed as
// contended. Errors are RFC 9457 problem details.
//
// Keys come from the Idempotency-Key header by default (draft-ietf-httpapi-idempotency-
// key-header-07), or from a KeyFunc: WebhookID (Standard Webhooks), GitHubDelivery,
// JSONField("id") for Stripe events, or any Header. They are per Config.Consumer (one
// per route) and, with Config.Scope, per client (e.g. the authenticated user), so that
// two clients sending the same key are two keys. The handler finds the claimed key, as
// stored, with inbox.ClaimFromContext(r.Context()).
//
// Tenants: with an inbox on an inbox.TenantStore, Config.Tenant (e.g.
// TenantFromHeader("X-Tenant-ID")) names each request's tenant, whose database or
// schema then holds the key, the stored response and the handler's writes. A request
// without a tenant gets 400, one with a tenant the store does not know 404; a tenant
// function or a TenantConfig.Lookup that fails otherwise (the directory is down) is a
// failure like the store's: 503 with Retry-After, or 500 when it is permanent.
//
// The package imports net/http, the standard library and the inbox; it works with the
// standard mux and with chi-style routers, since Middleware is a
// func(http.Handler) http.Handler.
package inboxhttp
