package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// RequirePostgres reports whether CI demands a real PostgreSQL
// (SANDBOXAPI_REQUIRE_POSTGRES=1): without one, PostgresURL fails the test
// instead of skipping it.
func RequirePostgres() bool { return os.Getenv("SANDBOXAPI_REQUIRE_POSTGRES") == "1" }

// pgServer is one throwaway PostgreSQL server per test process: initdb and
// pg_ctl from Debian's packages on a temporary folder, listening on a
// random loopback port and a unix socket in that folder.
type pgServer struct {
	dir, bin string
	opts     string // pg_ctl's -o: port, socket folder, settings
	port     int
	cred     *syscall.Credential
	admin    *sql.DB
}

var (
	pgOnce sync.Once
	pg     *pgServer
	pgErr  error
)

// pgBin finds the folder of initdb and pg_ctl: $SANDBOXAPI_PG_BIN, else the
// newest /usr/lib/postgresql/*/bin.
func pgBin() (string, error) {
	if d := os.Getenv("SANDBOXAPI_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (apt-get install postgresql)")
}

func (s *pgServer) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	// Variables of the caller's PostgreSQL must not leak into the server.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, out)
	}
	return nil
}

// startPostgres starts a server; with durable its commits wait for the
// WAL to reach the disk, as a production server's do (fsync on), else
// fsync is off, for speed.
func startPostgres(durable bool) (*pgServer, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandboxapi-pg-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{dir: dir, bin: bin}
	// PostgreSQL refuses to run as root: run it as the postgres user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running PostgreSQL as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	if err := s.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.opts = fmt.Sprintf("-p %d -k %s -h 127.0.0.1 -c max_connections=300 -c shared_buffers=32MB", s.port, dir)
	if !durable {
		s.opts += " -F"
	}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.watch(data)
	if s.admin, err = sql.Open("pgx", s.url("postgres")); err != nil {
		s.stop()
		return nil, err
	}
	s.admin.SetMaxOpenConns(2)
	return s, nil
}

// watch starts a watchdog that, should this test process die without
// StopPostgres (a timeout, a kill), stops the server (SIGQUIT to the
// postmaster: immediate shutdown) and removes its folder.
func (s *pgServer) watch(data string) {
	script := `while kill -0 "$1" 2>/dev/null; do sleep 2; done
pid=$(head -n 1 "$2/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null
sleep 2; rm -rf "$3"`
	cmd := exec.Command("/bin/sh", "-c", script, "pgwatch", strconv.Itoa(os.Getpid()), data, s.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}

// start starts the server on its data folder (again, after a stop), and
// waits until it accepts connections.
func (s *pgServer) start() error {
	return s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-o", s.opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
}

func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

func (s *pgServer) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	_ = s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
}

// PostgresURL returns the URL of a new, empty database on this process's
// throwaway PostgreSQL server (started on first use); the database is
// dropped when the test ends. Without PostgreSQL the test is skipped, or
// fails under SANDBOXAPI_REQUIRE_POSTGRES=1. A package that calls it stops
// the server from TestMain with StopPostgres.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() { pg, pgErr = startPostgres(false) })
	if pgErr != nil {
		if RequirePostgres() {
			t.Fatalf("PostgreSQL: %v", pgErr)
		}
		t.Skipf("PostgreSQL: %v", pgErr)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pg.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := pg.admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	return pg.url(name)
}

// StopPostgres stops the server PostgresURL started, if any, and removes
// its folder. Call it from TestMain after m.Run.
func StopPostgres() {
	if pg != nil {
		pg.stop()
	}
}

// TestStorePostgres reports whether SANDBOXAPI_TEST_STORE=postgres asks
// suites that open a store (the end-to-end harness, the mirror's tests) to
// use a fresh PostgreSQL database instead of a SQLite file.
func TestStorePostgres() bool { return os.Getenv("SANDBOXAPI_TEST_STORE") == "postgres" }

// Postgres is a PostgreSQL server of one test's own, which the test may
// stop and start again (same data folder, same port) to see what its
// clients do while the database is away. Not safe for concurrent use.
type Postgres struct{ s *pgServer }

// StartPostgres starts a server for t alone (skipped without PostgreSQL,
// or failed under SANDBOXAPI_REQUIRE_POSTGRES=1); it is stopped and
// removed when t ends.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return startOwn(t, false)
}

// StartDurablePostgres is StartPostgres with fsync on, for benchmarks
// whose figures depend on what a commit costs on a production server.
func StartDurablePostgres(t testing.TB) *Postgres {
	t.Helper()
	return startOwn(t, true)
}

func startOwn(t testing.TB, durable bool) *Postgres {
	t.Helper()
	s, err := startPostgres(durable)
	if err != nil {
		if RequirePostgres() {
			t.Fatalf("PostgreSQL: %v", err)
		}
		t.Skipf("PostgreSQL: %v", err)
	}
	t.Cleanup(s.stop)
	return &Postgres{s: s}
}

// URL is the server's postgres database.
func (p *Postgres) URL() string { return p.s.url("postgres") }

// Port is the loopback port the server listens on.
func (p *Postgres) Port() int { return p.s.port }

// Stop shuts the server down as an operator's restart does (pg_ctl stop
// -m fast: open sessions are ended with admin_shutdown) and waits until
// it has exited.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if err := p.s.run("pg_ctl", "-D", filepath.Join(p.s.dir, "data"), "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		t.Fatalf("stopping PostgreSQL: %v", err)
	}
}

// Start starts the stopped server again on the same data and port, and
// waits until it accepts connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if err := p.s.start(); err != nil {
		t.Fatalf("starting PostgreSQL again: %v", err)
	}
}
