package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/sbom"
	"github.com/sandboxapi/sandboxapi/store"
)

var (
	_ api.Installer = recordingInstaller{}
	_ api.SBOMs     = sbomSource{}
)

// CatalogueSBOM writes the catalogue's document to w and returns how many
// components it lists.
func CatalogueSBOM(ctx context.Context, m *mirror.Mirror, w io.Writer) (int, error) {
	arts, err := m.List(ctx, "")
	if err != nil {
		return 0, err
	}
	subject := sbom.Subject{Name: "sandboxapi mirror catalogue", Version: Version}
	if st, err := m.OSVStatus(ctx); err == nil {
		subject.Properties = append(subject.Properties, [2]string{sbom.PropCurrentOSV, st.SnapshotID},
			[2]string{"sandboxapi:osv:imported_at", st.ImportedAt.UTC().Format(time.RFC3339)})
	}
	pkgs := make([]sbom.Package, 0, len(arts))
	for _, a := range arts {
		pkgs = append(pkgs, artifactPackage(a))
	}
	return len(pkgs), sbom.Write(w, sbom.Build(subject, sbom.Tool{Name: "sandboxapi", Version: Version}, pkgs, time.Now()))
}

func artifactPackage(a mirror.Artifact) sbom.Package {
	return sbom.Package{Manager: string(a.Manager), Name: a.Name, Version: a.Version, Filename: a.Filename,
		SHA256: a.SHA256, Integrity: a.Integrity, URLPath: a.URLPath, Status: string(a.Status), Reasons: a.Reasons,
		Stripped: a.Stripped, Advisories: a.Advisories, Accepted: a.Accepted, OSVSnapshot: a.OSVSnapshot, Source: a.Source}
}

// recordingInstaller counts every install and records every package of a
// successful one in the store (session_installs), with the OSV snapshot its artifact had been
// judged against, for GET /v1/sessions/{id}/sbom.
type recordingInstaller struct {
	next api.Installer
	st   *store.Store
	mir  *mirror.Mirror
	log  *slog.Logger
	// observe, if set, counts each install (sandboxapi_installs_total).
	observe func(manager, outcome string, d time.Duration)
}

// installOutcome is the outcome label of an install's error.
func installOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sandbox.ErrRejected), errors.Is(err, sandbox.ErrInvalid):
		return "rejected"
	case errors.Is(err, sandbox.ErrInstallFailed):
		return "failed"
	}
	return "error"
}

func (r recordingInstaller) Install(ctx context.Context, owner, id string, req sandbox.InstallRequest, timeout time.Duration) (sandbox.InstallReply, error) {
	start := time.Now()
	reply, err := r.next.Install(ctx, owner, id, req, timeout)
	if r.observe != nil {
		r.observe(req.Manager, installOutcome(err), time.Since(start))
	}
	if err != nil {
		return reply, err
	}
	snap := map[string]string{}
	if arts, lerr := r.mir.List(ctx, mirror.Manager(reply.Manager)); lerr == nil {
		for _, a := range arts {
			snap[a.Filename+"\x00"+a.SHA256] = a.OSVSnapshot
		}
	}
	now := time.Now()
	rows := make([]store.InstallRow, 0, len(reply.Installed))
	for _, p := range reply.Installed {
		rows = append(rows, store.InstallRow{SessionID: id, KeyID: owner, Manager: reply.Manager, Name: p.Name, Version: p.Version,
			Filename: p.Filename, SHA256: p.SHA256, OSVSnapshot: snap[p.Filename+"\x00"+p.SHA256], InstalledAt: now})
	}
	// The packages are in the session whatever the store says: a failed
	// record is logged, not turned into a failed install.
	if rerr := r.st.InsertInstalls(context.WithoutCancel(ctx), rows); rerr != nil {
		r.log.Error("recording install for the SBOM", "session", id, "err", rerr)
	}
	return reply, nil
}

// sbomSource builds session SBOMs from the install records and the
// mirror's current view of each artifact.
type sbomSource struct {
	st  *store.Store
	mir *mirror.Mirror
}

func (s sbomSource) SessionSBOM(ctx context.Context, owner, id string) ([]byte, string, error) {
	rows, err := s.st.SessionInstalls(ctx, id)
	if err != nil {
		return nil, "", err
	}
	arts, err := s.mir.List(ctx, "")
	if err != nil {
		return nil, "", err
	}
	catalogue := make([]sbom.Package, 0, len(arts))
	for _, a := range arts {
		catalogue = append(catalogue, artifactPackage(a))
	}
	installed := make([]sbom.Installed, 0, len(rows))
	for _, r := range rows {
		installed = append(installed, sbom.Installed{Manager: r.Manager, Name: r.Name, Version: r.Version, Filename: r.Filename,
			SHA256: r.SHA256, OSVSnapshot: r.OSVSnapshot, InstalledAt: r.InstalledAt})
	}
	pkgs := sbom.SessionPackages(installed, catalogue)
	current := ""
	if st, err := s.mir.OSVStatus(ctx); err == nil {
		current = st.SnapshotID
	}
	subject := sbom.SessionSubject(id, current)
	var buf bytes.Buffer
	if err := sbom.Write(&buf, sbom.Build(subject, sbom.Tool{Name: "sandboxapi", Version: Version}, pkgs, time.Now())); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), sbom.MediaType, nil
}
