package tlsserve

import (
	"context"
	"log/slog"

	"github.com/sandboxapi/sandboxapi/internal/redact"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog gives certmagic a zap logger that writes to our slog logger,
// so its lines are JSON like ours.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log.With("component", "certmagic")})
}

// slogCore is a zapcore.Core over a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields)+2)
	if e.LoggerName != "" {
		args = append(args, "logger", e.LoggerName)
	}
	for k, v := range enc.Fields {
		// certmagic names the ACME directory (tls.acme_directory, which
		// may carry a credential) and the URLs it calls in its fields
		// and errors.
		switch x := v.(type) {
		case string:
			v = redact.Text(x)
		case error:
			v = redact.Err(x)
		}
		args = append(args, k, v)
	}
	c.log.Log(context.Background(), slogLevel(e.Level), redact.Text(e.Message), args...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
