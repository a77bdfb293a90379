package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// TestClassifyUnavailable checks the classifier over real error values:
// those of a dial to a closed port (by net and by the store's own pool), of
// contexts, and PostgreSQL's errors by SQLSTATE, bare and wrapped.
func TestClassifyUnavailable(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	_, dialErr := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if dialErr == nil {
		t.Fatal("dialled a closed port")
	}
	// The store's own pool on a closed port: pgx's ConnectError.
	db, err := openPostgres(fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable", port))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	poolErr := (&Store{db: db, dialect: Postgres}).Ping(context.Background())
	var ce *pgconn.ConnectError
	if !errors.As(poolErr, &ce) {
		t.Fatalf("ping of a closed port = %v, want a *pgconn.ConnectError in it", poolErr)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	pgErr := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "dial to a closed port", err: dialErr, want: true},
		{name: "store pool on a closed port", err: poolErr, want: true},
		{name: "DNS failure", err: &net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}, want: true},
		{name: "cancelled context (the client left)", err: cancelled.Err(), want: false},
		{name: "expired context", err: expired.Err(), want: true},
		{name: "deadline, wrapped", err: fmt.Errorf("looking up key: %w", context.DeadlineExceeded), want: true},
		{name: "bad connection", err: driver.ErrBadConn, want: true},
		{name: "connection lost mid-answer", err: fmt.Errorf("receiving: %w", io.ErrUnexpectedEOF), want: true},
		{name: "end of rows", err: io.EOF, want: false},
		{name: "no rows", err: sql.ErrNoRows, want: false},
		{name: "not found", err: ErrNotFound, want: false},
		{name: "plain error", err: errors.New("boom"), want: false},
		{name: "08000 connection_exception", err: pgErr("08000"), want: true},
		{name: "08003 connection_does_not_exist", err: pgErr("08003"), want: true},
		{name: "08006 connection_failure", err: pgErr("08006"), want: true},
		{name: "08001 sqlclient_unable_to_establish", err: pgErr("08001"), want: true},
		{name: "08004 server rejected the connection", err: pgErr("08004"), want: true},
		{name: "57P01 admin_shutdown", err: pgErr("57P01"), want: true},
		{name: "57P02 crash_shutdown", err: pgErr("57P02"), want: true},
		{name: "57P03 cannot_connect_now", err: pgErr("57P03"), want: true},
		{name: "57P05 idle_session_timeout", err: pgErr("57P05"), want: true},
		{name: "53300 too_many_connections", err: pgErr("53300"), want: true},
		{name: "57P01, wrapped", err: fmt.Errorf("inserting usage: %w", pgErr("57P01")), want: true},
		{name: "57014 query_canceled", err: pgErr("57014"), want: false},
		{name: "23505 unique_violation", err: pgErr("23505"), want: false},
		{name: "40001 serialization_failure", err: pgErr("40001"), want: false},
		{name: "42P01 undefined_table", err: pgErr("42P01"), want: false},
		{name: "53100 disk_full", err: pgErr("53100"), want: false},
		{name: "already classified", err: classify(driver.ErrBadConn), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err)
			if is := errors.Is(got, ErrUnavailable); is != tc.want {
				t.Fatalf("classify(%v) matches ErrUnavailable: %v, want %v", tc.err, is, tc.want)
			}
			if tc.err == nil {
				if got != nil {
					t.Fatalf("classify(nil) = %v", got)
				}
				return
			}
			// The cause stays reachable, and so does database/sql's
			// driver.ErrBadConn (its retry on a new connection needs it).
			if !errors.Is(got, tc.err) {
				t.Fatalf("classify(%v) = %v lost its cause", tc.err, got)
			}
			if !tc.want && got != tc.err {
				t.Fatalf("classify changed an error it does not classify: %v", got)
			}
		})
	}
}

// TestConnectTimeoutDefault checks that a URL without connect_timeout gets
// DefaultConnectTimeout, and one that sets it keeps it.
func TestConnectTimeoutDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want time.Duration
	}{
		{url: "postgres://u@127.0.0.1:1/db", want: DefaultConnectTimeout},
		{url: "postgres://u@127.0.0.1:1/db?connect_timeout=2", want: 2 * time.Second},
	} {
		cfg, err := pgConfig(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ConnectTimeout != tc.want {
			t.Errorf("%s: connect timeout %v, want %v", tc.url, cfg.ConnectTimeout, tc.want)
		}
	}
}

// TestSilentServerDoesNotHang: a server that accepts connections and never
// answers (a hung PostgreSQL, a middlebox holding the connection) makes a
// lookup without a deadline fail with ErrUnavailable after the default
// connect timeout, not hang.
func TestSilentServerDoesNotHang(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	db, err := openPostgres("postgres://u@" + l.Addr().String() + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &Store{db: db, dialect: Postgres}
	start := time.Now()
	_, err = st.KeyByHash(context.Background(), "h")
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lookup on a silent server: %v, want ErrUnavailable", err)
	}
	if took < DefaultConnectTimeout-time.Second || took > DefaultConnectTimeout+2*time.Second {
		t.Fatalf("lookup on a silent server took %v, want about %v", took, DefaultConnectTimeout)
	}
}
