module vdl/tests/clients/go/gapcheck

go 1.26.0
