package mcp

import (
	"github.com/sandboxapi/sandboxapi/api/wire"

	"context"
	"errors"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrKeyRefused means the server refused the configured API key.
var ErrKeyRefused = errors.New("the API key was refused")

// ServeStdio serves the tools on t (usually &sdk.StdioTransport{}) until the
// client disconnects or ctx ends, forwarding every call to o.BaseURL with
// o.Key. It checks the key first, so a desktop client sees a bad key at
// once instead of on the first tool call.
func ServeStdio(ctx context.Context, t sdk.Transport, o Options) error {
	o.Handler = nil
	if o.Key == "" {
		return fmt.Errorf("%w: no key given (set SANDBOXAPI_KEY)", ErrKeyRefused)
	}
	c, err := newClient(o)
	if err != nil {
		return err
	}
	// The server's languages and versions go into execute_code's schema.
	var list wire.RuntimeList
	if err := c.call(ctx, nil, "GET", "/v1/runtimes", nil, &list); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			return fmt.Errorf("%w by %s: %v", ErrKeyRefused, o.BaseURL, ae)
		}
		// The server may come up later; tool calls will report it.
		c.log.Warn("sandboxapi not reachable at start", "url", o.BaseURL, "err", err)
	}
	if o.Runtimes == nil {
		o.Runtimes = list.Runtimes
	}
	return newServer(c, o).Run(ctx, t)
}
