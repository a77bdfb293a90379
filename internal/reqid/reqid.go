// Package reqid carries a request's id in its context, so that every log
// line written on the request's behalf (API, executor, installer) can name
// it. It does no I/O.
package reqid

import "context"

type key struct{}

// With returns a copy of ctx that carries id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// From returns the id ctx carries, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}
