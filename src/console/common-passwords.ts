// The most common passwords (from public breach-frequency lists, lower-cased), refused at sign-up and password change.
export const COMMON_PASSWORDS: ReadonlySet<string> = new Set(`
123456 password 12345678 qwerty 123456789 12345 1234 111111 1234567 dragon 123123 baseball abc123 football monkey
letmein 696969 shadow master 666666 qwertyuiop 123321 mustang 1234567890 michael 654321 superman 1qaz2wsx 7777777
121212 000000 qazwsx 123qwe killer trustno1 jordan jennifer zxcvbnm asdfgh hunter buster soccer harley batman andrew
tigger sunshine iloveyou 2000 charlie robert thomas hockey ranger daniel starwars klaster 112233 george computer
michelle jessica pepper 1111 zxcvbn 555555 11111111 131313 freedom 777777 pass maggie 159753 aaaaaa ginger princess
joshua cheese amanda summer love ashley nicole chelsea biteme matthew access yankees 987654321 dallas austin thunder
taylor matrix whatever secret internet welcome admin administrator changeme default guest root toor login
password1 password12 password123 password1234 password12345 password! password01 password2 passw0rd p@ssw0rd p@ssword
passpass pass1234 pass12345 mypassword mypassword1 yourpassword thisismypassword passwordpassword
qwerty1 qwerty12 qwerty123 qwerty1234 qwertyui qwertyuiop123 qwer1234 1234qwer 1q2w3e 1q2w3e4r 1q2w3e4r5t 1q2w3e4r5t6y
q1w2e3r4t5 q1w2e3r4t5y6 qazwsxedc qazwsxedcrfv 123qweasd 123qweasdzxc qweasdzxc 1qaz2wsx3edc zaq12wsx zaq1zaq1 zaq1xsw2
qwaszx qazxsw asdfghjk asdfghjkl asdf1234 asdfasdf asd123 zxcvbnm123 zxcv1234
abcd1234 abc12345 abc123456 a1b2c3d4 a1b2c3d4e5 123abc aa123456 aa12345678
iloveyou1 iloveyou12 iloveyou123 iloveyou! loveyou loveme lovely babygirl angel flower purple
letmein1 letmein123 letmein! welcome1 welcome123 admin123 changeme123 secret123 guest123 login123
test1234 test12345 test123456 testtest testing123 temp1234 user1234
12345678910 0123456789 0987654321 1111111111 0000000000 123123123 147258369 123654789 789456123 741852963 147852369
football1 football123 baseball1 basketball superman1 starwars1 princess1 sunshine1 whatever1 trustno1! michael1 jennifer1
jordan23 monkey123 dragon123 charlie123 hunter2 hunter123 pokemon pokemon123 minecraft minecraft123 fortnite
liverpool arsenal manchester barcelona linkedin facebook google samsung samsung123 apple123 microsoft
hello hello123 hellohello helloworld winter spring autumn summer2024 summer2025 password2024 password2025 password2026
tollgate tollgate123
`.trim().split(/\s+/));
