package reqid

import (
	"context"
	"log/slog"
)

// Handler wraps h so that it stamps the request id a line's context
// carries on every line logged with one, unless the line names it
// already: executor, installer and egress lines written on a request's
// behalf can then be found by the id the client saw.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if id := From(ctx); id != "" {
		named := false
		r.Attrs(func(a slog.Attr) bool {
			named = a.Key == "request_id"
			return !named
		})
		if !named {
			r = r.Clone()
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h.Handler.WithAttrs(as)} }

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }
