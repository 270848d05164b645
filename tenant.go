package inbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// The tenant of a message travels in its context: the middleware derives it
// (Config.Tenant), Process, ProcessResult and Forget take it from the caller's context,
// and a TenantStore routes each call to that tenant's store (see TenantStore).

// Errors of tenant routing. Both are permanent: the message is refused before anything
// is written to any tenant's database, and every delivery of it fails the same way until
// the producer or the tenant directory changes. Route such messages to a poison queue
// (middleware.PoisonQueueWithFilter); retrying them cannot help.
var (
	// ErrNoTenant means no tenant could be derived for a message or call that needs one:
	// the metadata field Config.Tenant reads is missing or empty, or the context passed
	// to Process, ProcessResult or a TenantStore carries no tenant (ContextWithTenant).
	// Permanent.
	ErrNoTenant = errors.New("no tenant")

	// ErrUnknownTenant means the tenant named by a message or call is not one the
	// TenantStore can route to: TenantConfig.Lookup does not know it, or its name is
	// not valid. Nothing was written to any tenant, and the message was not processed on
	// any other database. Permanent.
	ErrUnknownTenant = errors.New("unknown tenant")
)

// maxTenantLen bounds tenant names, which appear in errors, logs and metric labels.
const maxTenantLen = 255

// DefaultTenantMetadata is the metadata field Config.Tenant reads by default when the
// store routes by tenant (TenantStore).
const DefaultTenantMetadata = "tenant"

type tenantContextKey struct{}

// ContextWithTenant returns a copy of ctx that carries tenant. A TenantStore routes the
// calls made with it (Process, ProcessResult, Forget, Purge...) to that tenant's store,
// and the handler finds the tenant in its context with TenantFromContext. The middleware
// sets it itself from Config.Tenant.
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantContextKey{}, tenant)
}

// TenantFromContext returns the tenant ctx carries, if any (ContextWithTenant).
func TenantFromContext(ctx context.Context) (string, bool) {
	tenant, ok := ctx.Value(tenantContextKey{}).(string)
	return tenant, ok && tenant != ""
}

// TenantFunc derives a message's tenant, for Config.Tenant. It returns an error
// wrapping ErrNoTenant when the message names none (permanent: the message is refused);
// an empty tenant is treated as none. Another error is the function's own, and keeps
// its meaning: the message is nacked and comes again.
// It may read metadata, the payload, or the message context (TenantFromContext, for a
// tenant an outer middleware put there).
type TenantFunc func(msg *message.Message) (string, error)

// TenantFromMetadata takes the tenant from the metadata field, e.g. "tenant" or
// "x-tenant-id". A message without it fails with an error wrapping ErrNoTenant that names
// the field.
func TenantFromMetadata(field string) TenantFunc {
	return func(msg *message.Message) (string, error) {
		if v := msg.Metadata[field]; v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: metadata field %q is missing or empty", ErrNoTenant, field)
	}
}

// checkTenant checks a tenant name before any lookup: a name that could not be a
// tenant's is unknown, whatever the directory says.
func checkTenant(tenant string) error {
	switch {
	case tenant == "":
		return ErrNoTenant
	case len(tenant) > maxTenantLen:
		return fmt.Errorf("%w: the tenant name is %d bytes long, more than %d", ErrUnknownTenant, len(tenant), maxTenantLen)
	case !utf8.ValidString(tenant) || strings.ContainsFunc(tenant, isControl):
		return fmt.Errorf("%w: the tenant name %q is not valid UTF-8 text without control characters", ErrUnknownTenant, tenant)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// tenantError reports whether err is one of the permanent tenant routing errors.
func tenantError(err error) bool {
	return errors.Is(err, ErrNoTenant) || errors.Is(err, ErrUnknownTenant)
}

// withTenant adds the tenant ctx carries, if any, to the fields of a log line that names
// a key: the same key in two tenants is two messages (ADR 143).
func withTenant(ctx context.Context, fields watermill.LogFields) watermill.LogFields {
	if tenant, ok := TenantFromContext(ctx); ok {
		fields["tenant"] = tenant
	}
	return fields
}

// tenantOrigin says where the middleware found a message's tenant, for an unknown
// tenant's error: the metadata fields that hold it, or Config.Tenant's own source.
func tenantOrigin(msg *message.Message, tenant string) string {
	var fields []string
	for k, v := range msg.Metadata {
		if v == tenant {
			fields = append(fields, fmt.Sprintf("%q", k))
		}
	}
	sort.Strings(fields)
	switch len(fields) {
	case 0:
		return "derived by Config.Tenant, not from the message metadata"
	case 1:
		return "from metadata field " + fields[0]
	}
	return "from metadata fields " + strings.Join(fields, ", ")
}
