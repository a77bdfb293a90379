package mirror

import (
	"context"
	"fmt"
	"sync"
)

// pageCache holds rendered index pages and packuments. Every write to
// mirror_artifacts bumps mirror_state.generation (SQLite triggers, so writes
// from other processes count too); a page is reused only while the
// generation it was rendered at is current, so a quarantine or removal
// takes effect on the next request. Safe for concurrent use.
type pageCache struct {
	mu    sync.Mutex
	gen   int64
	pages map[string][]byte
}

const maxCachedPages = 4096

// generation reads the current index generation.
func (m *Mirror) generation(ctx context.Context) (int64, error) {
	var g int64
	if err := m.genStmt.QueryRowContext(ctx).Scan(&g); err != nil {
		return 0, fmt.Errorf("reading mirror generation: %w", err)
	}
	return g, nil
}

// cachedPage returns the page for key, rendering it with render when the
// cache is cold or stale. A nil page from render (not found) is not cached.
func (m *Mirror) cachedPage(ctx context.Context, key string, render func() ([]byte, error)) ([]byte, error) {
	gen, err := m.generation(ctx)
	if err != nil {
		return nil, err
	}
	c := &m.cache
	c.mu.Lock()
	if c.gen != gen || c.pages == nil {
		c.gen, c.pages = gen, make(map[string][]byte)
	}
	if b, ok := c.pages[key]; ok {
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	b, err := render()
	if err != nil || b == nil {
		return b, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if len(c.pages) >= maxCachedPages {
			c.pages = make(map[string][]byte)
		}
		c.pages[key] = b
	}
	c.mu.Unlock()
	return b, nil
}
