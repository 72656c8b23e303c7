-- app_user may use shop_lab and the per-slot copies shop_lab_1 … (parallel runs never share one).
GRANT ALL PRIVILEGES ON `shop\_lab%`.* TO 'app_user'@'%';
GRANT PROCESS ON *.* TO 'app_user'@'%';
