// Package ocspb holds the protocol buffer and gRPC definitions of the occl
// OCS controller service (proto package occl.ocs.v1), generated from
// ocs.proto, plus hand-written Validate methods on the request messages
// (validate.go) that the server's validation interceptor calls.
//
// The generated files ocs.pb.go and ocs_grpc.pb.go are committed. To
// regenerate them, install protoc (Debian: apt-get install -y
// protobuf-compiler), protoc-gen-go and protoc-gen-go-grpc (go install
// google.golang.org/protobuf/cmd/protoc-gen-go@latest
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@latest), put them on PATH and
// run:
//
//	go generate ./reconfig/ocspb
//
// Most programs should use the Go API of package
// github.com/occl/occl/reconfig/ocs rather than these types directly.
package ocspb

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ocs.proto
