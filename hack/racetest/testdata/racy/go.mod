module example.com/racy

go 1.26
