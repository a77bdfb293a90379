package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestMirrorPackageReads(t *testing.T) { eachBackend(t, testMirrorPackageReads) }

func testMirrorPackageReads(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, a := range []struct{ manager, key, name, version, status, adv, deps string }{
		{"npm", "left-pad", "left-pad", "1.0.0", "admitted", `[]`, `{}`},
		{"npm", "left-pad", "Left-Pad", "1.1.0", "refused", `["GHSA-2","GHSA-1"]`, `{}`},
		{"npm", "left-pad", "left-pad", "1.2.0", "refused", `["GHSA-1","GHSA-3"]`, `{}`},
		{"npm", "uses-pad", "uses-pad", "1.0.0", "admitted", `[]`, `{"LEFT-PAD":"^1.0.0"}`},
		{"npm", "uses-pad", "uses-pad", "1.1.0", "admitted", `[]`, `{"left-pad":"^1.1.0"}`},
		{"npm", "range-only", "range-only", "1.0.0", "admitted", `[]`, `{"x":"left-pad:"}`},
		{"npm", "prefix", "prefix", "1.0.0", "admitted", `[]`, `{"left-pad-x":"1"}`},
		{"npm", "wildcard", "wildcard", "1.0.0", "admitted", `[]`, `{"leftxpad":"1"}`},
		{"pip", "left-pad", "left_pad", "1.0", "admitted", `[]`, `{}`},
	} {
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO mirror_artifacts(manager,name_key,name,version,filename,sha256,status,advisories,dependencies,created_at,updated_at)
			VALUES (?,?,?,?,?,?,?,?,?,?,?)`, a.manager, a.key, a.name, a.version, a.name+"-"+a.version, fmt.Sprint(i), a.status, a.adv, a.deps,
			ms(at), ms(at.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	rows, total, err := st.MirrorPackage(ctx, "npm", "left-pad", 1, 1)
	if err != nil || total != 3 || len(rows) != 1 || rows[0].Version != "1.1.0" || !slices.Equal(rows[0].Advisories, []string{"GHSA-2", "GHSA-1"}) {
		t.Fatalf("MirrorPackage page 2 = %+v, %d, %v", rows, total, err)
	}
	if rows, total, err := st.MirrorPackage(ctx, "npm", "nope", 0, 10); err != nil || total != 0 || len(rows) != 0 {
		t.Fatalf("unknown package: %v %d %v", rows, total, err)
	}
	ids, more, err := st.MirrorPackageAdvisories(ctx, "npm", "left-pad", 10)
	if err != nil || more || !slices.Equal(ids, []string{"GHSA-1", "GHSA-2", "GHSA-3"}) {
		t.Fatalf("advisories %v %v %v", ids, more, err)
	}
	if ids, more, err := st.MirrorPackageAdvisories(ctx, "npm", "left-pad", 2); err != nil || !more || len(ids) != 2 {
		t.Fatalf("capped advisories %v %v %v", ids, more, err)
	}
	names, err := st.MirrorPackageNames(ctx, "npm", "left-pad", 10)
	if err != nil || !slices.Equal(names, []string{"Left-Pad", "left-pad"}) {
		t.Fatalf("names %v %v", names, err)
	}
	refs, more, err := st.NPMDependents(ctx, "left-pad", 10)
	if want := []MirrorRef{{"uses-pad", "1.0.0"}, {"uses-pad", "1.1.0"}}; err != nil || more || !slices.Equal(refs, want) {
		t.Fatalf("dependents %+v %v %v, want %+v", refs, more, err, want)
	}
	if refs, more, err := st.NPMDependents(ctx, "left-pad", 1); err != nil || !more || len(refs) != 1 {
		t.Fatalf("capped dependents %+v %v %v", refs, more, err)
	}
	for _, wild := range []string{"%", "left_pad", "left%", "!", `"`, ""} {
		if refs, _, err := st.NPMDependents(ctx, wild, 10); err != nil || len(refs) != 0 {
			t.Fatalf("NPMDependents(%q) = %+v %v", wild, refs, err)
		}
	}
	var installs []InstallRow
	for i := range 5 {
		installs = append(installs, InstallRow{SessionID: fmt.Sprintf("s%d", i%3), Manager: "npm", Name: "left-pad", Version: fmt.Sprintf("1.%d.0", i),
			Filename: "f", SHA256: "x", InstalledAt: at.Add(time.Duration(i) * time.Second)})
	}
	installs = append(installs, InstallRow{SessionID: "s9", Manager: "pip", Name: "left-pad", Version: "1.0", Filename: "f", SHA256: "x", InstalledAt: at.Add(time.Hour)})
	if err := st.InsertInstalls(ctx, installs); err != nil {
		t.Fatal(err)
	}
	got, err := st.PackageInstalls(ctx, "npm", names, 2)
	if err != nil || len(got) != 2 || got[0].SessionID != "s1" || got[0].Version != "1.4.0" || got[1].SessionID != "s0" || got[1].Version != "1.3.0" {
		t.Fatalf("installs %+v %v", got, err)
	}
	if got, err := st.PackageInstalls(ctx, "npm", nil, 2); err != nil || len(got) != 0 {
		t.Fatalf("no names: %+v %v", got, err)
	}
}
