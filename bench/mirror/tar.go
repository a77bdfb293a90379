package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"time"
)

func newGzip(w io.Writer) *gzip.Writer { return gzip.NewWriter(w) }

func newTar(w io.Writer) *tar.Writer { return tar.NewWriter(w) }

func addTar(tw *tar.Writer, name, body string) {
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg})
	io.WriteString(tw, body)
}
