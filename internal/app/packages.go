package app

import (
	"context"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/mirror"
)

// mirrorPackages adapts the mirror to api.Packages (POST /v1/packages/check).
// It is safe for concurrent use.
type mirrorPackages struct{ m *mirror.Mirror }

var _ api.Packages = mirrorPackages{}

func (p mirrorPackages) Check(ctx context.Context, manager string, specs []string) ([]api.PackageVerdict, error) {
	vs, err := p.m.Check(ctx, manager, specs)
	if err != nil {
		return nil, err
	}
	out := make([]api.PackageVerdict, len(vs))
	for i, v := range vs {
		out[i] = api.PackageVerdict(v)
	}
	return out, nil
}
