package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
)

// langProgram is what the per-language tests run in one language. main
// prints "hello", the version of the runtime it runs on, the first line
// of its stdin upper-cased and the content of data.txt (one line each),
// and writes "written" to out.txt; badSyntax (compiled languages) fails
// to compile.
type langProgram struct {
	main, badSyntax string
	// versionOf: the language whose default version main prints, when
	// it is not the language's own (TypeScript prints its Node.js).
	versionOf string
}

// langPrograms has a program for every language of the runtimes file:
// TestEveryLanguageAndVersion fails on a language missing here.
var langPrograms = map[string]langProgram{
	"python3": {main: "import sys, platform\nprint('hello'); print(platform.python_version()); print(sys.stdin.readline().strip().upper())\n" +
		"print(open('data.txt').read().strip()); open('out.txt', 'w').write('written')"},
	"javascript": {main: `const fs = require("fs"); console.log("hello"); console.log(process.versions.node);` +
		` console.log(fs.readFileSync(0, "utf8").split("\n")[0].toUpperCase()); console.log(fs.readFileSync("data.txt", "utf8").trim()); fs.writeFileSync("out.txt", "written");`},
	"typescript": {main: `import * as fs from "fs"; const v: string = process.versions.node; console.log("hello"); console.log(v);` +
		` console.log(fs.readFileSync(0, "utf8").split("\n")[0].toUpperCase()); console.log(fs.readFileSync("data.txt", "utf8").trim()); fs.writeFileSync("out.txt", "written");`,
		badSyntax: `const x: number = ;`, versionOf: "javascript"},
	"go": {main: "package main\nimport (\"bufio\"; \"fmt\"; \"os\"; \"runtime\"; \"strings\")\nfunc main() {\n fmt.Println(\"hello\"); fmt.Println(strings.TrimPrefix(runtime.Version(), \"go\"))\n" +
		" s, _ := bufio.NewReader(os.Stdin).ReadString('\\n'); fmt.Println(strings.ToUpper(strings.TrimSpace(s)))\n b, _ := os.ReadFile(\"data.txt\"); fmt.Println(strings.TrimSpace(string(b)))\n" +
		" if err := os.WriteFile(\"out.txt\", []byte(\"written\"), 0o644); err != nil { panic(err) }\n}\n",
		badSyntax: "package main\nfunc main() { undefined() }"},
	"java": {main: "import java.nio.file.*; import java.util.Scanner;\npublic class Main { public static void main(String[] a) throws Exception {\n" +
		" System.out.println(\"hello\"); System.out.println(System.getProperty(\"java.version\")); System.out.println(new Scanner(System.in).nextLine().toUpperCase());\n" +
		" System.out.println(Files.readString(Path.of(\"data.txt\")).trim()); Files.writeString(Path.of(\"out.txt\"), \"written\"); } }",
		badSyntax: `public class Main { void f() { int x = } }`},
	"c": {main: "#include <stdio.h>\n#include <ctype.h>\n#include <string.h>\nint main(){ char b[256]; puts(\"hello\"); puts(__VERSION__);\n" +
		" if(!fgets(b,256,stdin)) return 1; for(char*p=b;*p&&*p!='\\n';p++) putchar(toupper(*p)); putchar('\\n');\n" +
		" FILE*f=fopen(\"data.txt\",\"r\"); if(!f||!fgets(b,256,f)) return 2; fputs(b,stdout); if(b[0]&&b[strlen(b)-1]!='\\n') putchar('\\n'); fclose(f);\n" +
		" f=fopen(\"out.txt\",\"w\"); fputs(\"written\",f); fclose(f); return 0; }",
		badSyntax: "int main(){ return x; }"},
	"cpp": {main: "#include <bits/stdc++.h>\nint main(){ std::cout<<\"hello\\n\"<<__VERSION__<<\"\\n\"; std::string s; std::getline(std::cin,s);\n" +
		" std::transform(s.begin(),s.end(),s.begin(),::toupper); std::cout<<s<<\"\\n\"; std::ifstream in(\"data.txt\"); std::string d; std::getline(in,d); std::cout<<d<<std::endl;\n" +
		" std::ofstream(\"out.txt\")<<\"written\"; }",
		badSyntax: "int main(){ std::vector<int> v; }"},
	"bash": {main: `echo hello; echo "${BASH_VERSION%%(*}"; read -r l; echo "${l^^}"; cat data.txt; echo; printf written > out.txt`},
}

// runtimeVersions is GET /v1/runtimes as language -> series -> exact
// version, with each language's default series under "".
func runtimeVersions(t *testing.T, s *server, key string) map[string]map[string]string {
	t.Helper()
	r := s.do("GET", "/v1/runtimes", key, nil)
	if r.status != 200 {
		t.Fatalf("runtimes: %d %s", r.status, r.body)
	}
	out := map[string]map[string]string{}
	for _, x := range r.json(t)["runtimes"].([]any) {
		rt := x.(map[string]any)
		m := map[string]string{}
		for _, y := range rt["versions"].([]any) {
			v := y.(map[string]any)
			m[v["series"].(string)] = v["version"].(string)
			if v["default"] == true {
				m[""] = v["series"].(string)
			}
		}
		out[rt["language"].(string)] = m
	}
	return out
}

// checkMain checks main's reply: its output lines and, when version is
// set, the version it ran on.
func checkMain(t *testing.T, what string, r reply, version string) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("%s: %d %s", what, r.status, r.body)
	}
	m := r.json(t)
	lines := strings.Split(strings.TrimRight(m["stdout"].(string), "\n"), "\n")
	if m["status"] != "ok" || len(lines) != 4 || lines[0] != "hello" || lines[2] != "SHOUT" || lines[3] != "from a file" {
		t.Fatalf("%s: %s", what, r.body)
	}
	if !strings.HasPrefix(lines[1], version) {
		t.Fatalf("%s: ran on %q, want %s", what, lines[1], version)
	}
}

// Every language at every version the runtimes file lists, stateless and
// in a session: hello world with the version it runs on, stdin, a file in
// and (in the session) out, and a compile error for compiled languages.
func TestEveryLanguageAndVersion(t *testing.T) {
	rts, err := executor.LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "executor:\n  warm_pool: 1\n  home_size: 128M\n  memory_mb: 768\n")
	key := s.key("MEGA")
	listed := runtimeVersions(t, s, key)
	for _, rt := range rts.Versions() {
		t.Run(rt.Name+"-"+rt.Series, func(t *testing.T) {
			prog, ok := langPrograms[rt.Name]
			if !ok {
				t.Fatalf("the runtimes file lists %s, which has no programs in langPrograms", rt.Name)
			}
			exact := listed[rt.Name][rt.Series]
			if exact == "" {
				t.Fatalf("GET /v1/runtimes lists no %s %s: %v", rt.Name, rt.Series, listed[rt.Name])
			}
			want := exact
			if prog.versionOf != "" {
				of := listed[prog.versionOf]
				want = of[of[""]]
			}
			body := map[string]any{"language": rt.Name, "version": rt.Series, "code": prog.main, "stdin": "shout\n", "timeout": 60,
				"files": []map[string]any{{"path": "data.txt", "content": "from a file\n"}}}
			checkMain(t, "stateless", s.do("POST", "/v1/execute", key, body), want)
			if prog.badSyntax != "" {
				r := s.do("POST", "/v1/execute", key, map[string]any{"language": rt.Name, "version": rt.Series, "code": prog.badSyntax, "timeout": 60})
				if r.status != 200 || r.json(t)["status"] != "compile_error" || r.json(t)["stderr"] == "" {
					t.Fatalf("compile error, stateless: %d %s", r.status, r.body)
				}
			}

			id := s.sessionWith(key, map[string]any{"language": rt.Name, "version": rt.Series})
			defer s.do("DELETE", "/v1/sessions/"+id, key, nil)
			g := s.do("GET", "/v1/sessions/"+id, key, nil)
			if g.status != 200 || g.json(t)["version"] != exact {
				t.Fatalf("session: %d %s, want version %s", g.status, g.body, exact)
			}
			if r := s.do("PUT", "/v1/sessions/"+id+"/files?path=data.txt", key, []byte("from a file\n")); r.status/100 != 2 {
				t.Fatalf("put data.txt: %d %s", r.status, r.body)
			}
			checkMain(t, "session", s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": prog.main, "stdin": "shout\n", "timeout": 60}), want)
			if f := s.do("GET", "/v1/sessions/"+id+"/files?path=out.txt", key, nil); f.status != 200 || string(f.body) != "written" {
				t.Fatalf("get out.txt: %d %q", f.status, f.body)
			}
			if prog.badSyntax != "" {
				r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": prog.badSyntax, "timeout": 60})
				if r.status != 200 || r.json(t)["status"] != "compile_error" || r.json(t)["stderr"] == "" {
					t.Fatalf("compile error, session: %d %s", r.status, r.body)
				}
			}
		})
	}
}

// A session created with a version keeps it across hibernation and a
// server restart, and a fork inherits it; an unknown version is a 400
// unsupported_version that lists the versions present, wherever it is
// asked for.
func TestSessionKeepsItsVersion(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("MEGA")
	listed := runtimeVersions(t, s, key)
	js := listed["javascript"]
	var old string
	for series := range js {
		if series != "" && series != js[""] && (old == "" || series < old) {
			old = series
		}
	}
	if old == "" {
		t.Fatalf("javascript has one version: %v", js)
	}
	node := `console.log(process.versions.node)`
	ranOn := func(id string) string {
		t.Helper()
		return strings.TrimSpace(s.exec(key, id, node)["stdout"].(string))
	}
	id := s.sessionWith(key, map[string]any{"language": "node", "version": old})
	if got := ranOn(id); got != js[old] {
		t.Fatalf("node %s session runs %s, want %s", old, got, js[old])
	}
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	if got := ranOn(id); got != js[old] {
		t.Fatalf("after a resume: %s, want %s", got, js[old])
	}
	s.stop()
	s.start()
	if r := s.do("GET", "/v1/sessions/"+id, key, nil); r.status != 200 || r.json(t)["version"] != js[old] {
		t.Fatalf("after a restart: %d %s", r.status, r.body)
	}
	if got := ranOn(id); got != js[old] {
		t.Fatalf("after a restart: %s, want %s", got, js[old])
	}
	f := s.do("POST", "/v1/sessions/"+id+"/fork", key, nil)
	if f.status != 201 && f.status != 200 {
		t.Fatalf("fork: %d %s", f.status, f.body)
	}
	child := f.json(t)["id"].(string)
	if f.json(t)["version"] != js[old] || ranOn(child) != js[old] {
		t.Fatalf("fork: %s", f.body)
	}
	s.do("DELETE", "/v1/sessions/"+child, key, nil)

	for _, c := range []struct {
		what, method, path string
		body               map[string]any
	}{
		{"execute", "POST", "/v1/execute", map[string]any{"language": "javascript", "version": "20", "code": node}},
		{"a version prefix that is no version", "POST", "/v1/execute", map[string]any{"language": "javascript", "version": old[:1], "code": node}},
		{"session", "POST", "/v1/sessions", map[string]any{"language": "javascript", "version": "20"}},
		{"fork with a language", "POST", "/v1/sessions/" + id + "/fork", map[string]any{"language": "python3", "version": "2.7"}},
		{"fork without one", "POST", "/v1/sessions/" + id + "/fork", map[string]any{"version": "20"}},
	} {
		r := s.do(c.method, c.path, key, c.body)
		if r.status != 400 || r.errCode(t) != "unsupported_version" {
			t.Errorf("%s: %d %s", c.what, r.status, r.body)
			continue
		}
		if c.what != "fork with a language" && !strings.Contains(string(r.body), js[old]) {
			t.Errorf("%s: the message does not list %s: %s", c.what, js[old], r.body)
		}
	}
	// A session's execute takes no version: it has one.
	if r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": node, "version": js[""]}); r.status != 400 {
		t.Errorf("session execute with a version: %d %s", r.status, r.body)
	}
	// Nothing was left behind by the refusals.
	l := s.do("GET", "/v1/sessions", key, nil)
	live := 0
	for _, x := range l.json(t)["sessions"].([]any) {
		if st := x.(map[string]any)["state"]; st != "ended" {
			live++
		}
	}
	if live != 1 {
		t.Errorf("%d sessions after the refusals, want 1: %s", live, l.body)
	}
}

// The rootfs's versions file holds exactly the runtimes file's languages
// and versions: a rootfs built from another runtimes file fails here.
func TestRootfsVersionsMatchTheRuntimesFile(t *testing.T) {
	_, versions, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(versions)
	if err != nil {
		t.Fatal(err)
	}
	rts, err := executor.LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := rts.CheckVersionsFile(b); err != nil {
		t.Fatalf("%s disagrees with configs/runtimes.yaml (rebuild the rootfs: sandboxapi rootfs build):\n%v", versions, err)
	}
}

// A language is one entry of the runtimes file: a copy of it with perl
// added (its interpreter is part of every Debian system), and no other
// file changed, runs perl stateless and in a session and lists it with
// its version.
func TestAddALanguageInTheRuntimesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "runtimes.yaml")
	perl := `  perl:
    aliases: [pl]
    file: main.pl
    run: [perl, "{dir}/main.pl"]
    warm: perl -e 1
    versions:
      - version: "5"
        default: true
        source: debian
        probe: perl -e 'print substr($^V, 1)'
`
	if err := os.WriteFile(file, append(append([]byte{}, configs.Runtimes...), perl...), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "executor:\n  warm_pool: 1\n  home_size: 64M\n  runtimes_file: "+file+"\n")
	key := s.key("MEGA")
	if v := runtimeVersions(t, s, key)["perl"]; v[""] != "5" || v["5"] == "" {
		t.Fatalf("GET /v1/runtimes: perl %v", v)
	}
	code := `print "hello\n"; printf "%vd\n", $^V; my $l = <STDIN>; chomp $l; print uc($l), "\n"; open(my $f, "<", "data.txt") or die; print scalar(<$f>); open(my $o, ">", "out.txt") or die; print $o "written"; close $o;`
	r := s.do("POST", "/v1/execute", key, map[string]any{"language": "pl", "code": code, "stdin": "shout\n",
		"files": []map[string]any{{"path": "data.txt", "content": "from a file\n"}}})
	checkMain(t, "stateless", r, "5.")
	id := s.sessionWith(key, map[string]any{"language": "perl", "version": "5"})
	s.do("PUT", "/v1/sessions/"+id+"/files?path=data.txt", key, []byte("from a file\n"))
	checkMain(t, "session", s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code, "stdin": "shout\n"}), "5.")
	if f := s.do("GET", "/v1/sessions/"+id+"/files?path=out.txt", key, nil); f.status != 200 || string(f.body) != "written" {
		t.Fatalf("get out.txt: %d %q", f.status, f.body)
	}
}

// A session whose version leaves the runtimes file (an operator removed
// it before its sessions ended) is not lost at the restart: its calls
// answer 400 unsupported_version naming the versions present, and with
// the version back it runs again, its files kept.
func TestSessionWhoseVersionLeftTheRuntimesFile(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("MEGA")
	id := s.sessionWith(key, map[string]any{"language": "javascript", "version": "22"})
	s.exec(key, id, `require("fs").writeFileSync("/home/sandbox/kept", "yes")`)

	without := regexp.MustCompile(`(?m)^      - version: "22"\n(        .*\n)+`).ReplaceAllString(string(configs.Runtimes), "")
	if without == string(configs.Runtimes) {
		t.Fatal("the runtimes file has no javascript 22 entry to remove")
	}
	file := filepath.Join(t.TempDir(), "runtimes.yaml")
	if err := os.WriteFile(file, []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	setConfig := func(b []byte) {
		if err := os.WriteFile(s.config, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.stop()
	setConfig([]byte(strings.Replace(string(orig), "executor:\n", "executor:\n  runtimes_file: "+file+"\n", 1)))
	s.start()
	r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "console.log(1)"})
	if r.status != 400 || r.errCode(t) != "unsupported_version" || !strings.Contains(string(r.body), "present: 26.") {
		t.Fatalf("execute without its version: %d %s", r.status, r.body)
	}
	if g := s.do("GET", "/v1/sessions/"+id, key, nil); g.status != 200 || g.json(t)["state"] == "ended" {
		t.Fatalf("the session after the restart: %d %s", g.status, g.body)
	}
	s.stop()
	setConfig(orig)
	s.start()
	out := s.exec(key, id, `console.log(require("fs").readFileSync("/home/sandbox/kept", "utf8"), process.versions.node.split(".")[0])`)
	if out["stdout"] != "yes 22\n" {
		t.Fatalf("with its version back: %v", out)
	}
}
