# logtics.gp: the y tics of a log axis from lo to hi: every decade, and 2 and 5 within them where
# the axis spans two decades or less (a value between two lone decade labels is hard to read).
ys = ""
do for [k = -9:5] {
    do for [m in "1 2 5"] {
        y = m * 10.0**k
        if (y >= lo * 0.999 && y <= hi * 1.001 && (m eq "1" || hi / lo <= 100.01)) {
            # "0.00001", not "1e-05": as many decimals as the value needs
            dg = y < 1 ? ceil(-log10(y) - 1e-9) : 0
            ys = ys . sprintf("\"" . sprintf("%%.%df", dg) . "\" %g, ", y, y)
        }
    }
}
eval "set ytics (" . ys[1:strlen(ys) - 2] . ")"
set yrange [lo:hi]
