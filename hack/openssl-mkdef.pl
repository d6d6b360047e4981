#!/usr/bin/env perl
# A stand-in for OpenSSL's util/mkdef.pl, which the openssl-src crate leaves out
# (hack/build-openssl.sh): the GNU ld version script of a shared library from its ordinals file
# (util/libcrypto.num, util/libssl.num), one node per OpenSSL version, each inheriting the one
# before, every symbol that exists global, the rest local. Symbols of features the build leaves
# out (zlib, SCTP, KTLS, ...) are skipped, as the real script skips them.
# Called by OpenSSL's Makefile as: mkdef.pl --version V --type lib --ordinals F --name N --OS linux
use strict; use warnings;
my %o = (); my @a = @ARGV;
while (@a) { my $k = shift @a; if ($k =~ /^--(\w+)$/) { $o{$1} = shift @a; } }
open(my $f, '<', $o{ordinals}) or die;
my %by; my @order;
while (<$f>) {
  next if /^\s*#/ || !/\S/;
  my ($sym, $num, $ver, $info) = split /\s+/;
  next unless $info =~ /^EXIST/;
  next if $info =~ /:.*\b(ZLIB|SCTP|KTLS|SSL3_METHOD|WEAK_SSL_CIPHERS|MD2|RC5|EC_NISTP_64_GCC_128|TRACE|CRYPTO_MDEBUG|UNIT_TEST|BROTLI|ZSTD|SM2_PRECOMP|STDIO_NOTHING)\b/;
  $ver =~ tr/_/./;
  push @order, $ver unless $by{$ver};
  push @{$by{$ver}}, $sym;
}
my @vers = sort { my @x = split /\./, $a; my @y = split /\./, $b; $x[0] <=> $y[0] || $x[1] <=> $y[1] || $x[2] <=> $y[2] } @order;
my $prev;
for my $i (0..$#vers) {
  my $v = $vers[$i];
  print "OPENSSL_$v {\n    global:\n";
  print "        $_;\n" for @{$by{$v}};
  print "    local: *;\n" if $i == 0;
  print "}", ($prev ? " OPENSSL_$prev" : ""), ";\n\n";
  $prev = $v;
}
